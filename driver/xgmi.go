package driver

// XGMIGroups are the groups of GPUs of one XGMI hive a node publishes as group devices,
// each as positions in inv.GPUs, ascending: within each hive (its GPUs in index order),
// the aligned power-of-two blocks of 2, 4, 8, ... GPUs, as on an NVSwitch board, so that
// small groups keep large blocks free. On an MI250X the aligned pairs are the two GCDs of
// one module. GPUs that are compute partitions of a larger GPU (CPX, DPX) are left out:
// partitions of one GPU are not linked to each other by XGMI.
func (inv *Inventory) XGMIGroups() [][]int {
	var hives []string
	members := map[string][]int{}
	for pos := range inv.GPUs {
		k := inv.GPUs[pos].KFD
		if k == nil || k.XGMIHive == "" || k.Partitions > 1 {
			continue
		}
		if members[k.XGMIHive] == nil {
			hives = append(hives, k.XGMIHive)
		}
		members[k.XGMIHive] = append(members[k.XGMIHive], pos)
	}
	var out [][]int
	for _, h := range hives {
		m := members[h]
		for size := 2; size <= len(m); size *= 2 {
			for start := 0; start+size <= len(m); start += size {
				out = append(out, m[start:start+size:start+size])
			}
		}
	}
	return out
}
