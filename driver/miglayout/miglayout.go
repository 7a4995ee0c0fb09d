// Package miglayout reads declarative MIG layouts in the format of NVIDIA's mig-parted
// (version v1): named layouts ("mig-configs"), each a list of entries that say, for the
// GPUs they select by index ("devices") and model ("device-filter"), whether MIG mode is
// on ("mig-enabled") and which MIG devices exist ("mig-devices", profile name to count).
//
//	version: v1
//	mig-configs:
//	  all-disabled:
//	  - devices: all
//	    mig-enabled: false
//	  all-balanced:
//	  - device-filter: ["0x233010DE", "0x233110DE"]
//	    devices: all
//	    mig-enabled: true
//	    mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
//
// Parsing is strict and bounded: unknown fields, repeated keys, wrong types and values are
// errors that name the field and what it accepts; YAML anchors, aliases and merge keys are
// refused; the file's size, nesting, layouts, entries and lists have limits (MaxFileBytes
// and the others), and an entry counts at most MaxInstancesPerGPU MIG devices, so that no
// file makes reading or applying it costly.
package miglayout

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/internal/yamldoc"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
)

// Version is the only layout file version.
const Version = "v1"

// File is a parsed layout file.
type File struct {
	Version string
	// Layouts are the entries of each layout, by name, in file order.
	Layouts map[string][]Entry
}

// Entry is one element of a layout: the GPUs it selects and what they become.
type Entry struct {
	// DeviceFilter selects GPUs by model; empty selects every model.
	DeviceFilter []Filter
	// AllDevices is devices: all; otherwise Devices lists the GPU indices selected.
	AllDevices bool
	Devices    []int
	// MIGEnabled is the GPUs' MIG mode.
	MIGEnabled bool
	// MIGDevices counts the MIG devices by profile name ("1g.10gb", "1g.10gb+me"); empty
	// with MIG enabled means MIG mode without instances.
	MIGDevices map[string]int
}

// Filter is one device-filter value: a PCI device ID as mig-parted writes it
// ("0x233010DE": device 0x2330, vendor 0x10DE; optionally ":<subsystem ID>"), or a GPU
// product name as NVML reports it ("NVIDIA H100 80GB HBM3"), matched without regard to
// case.
type Filter struct {
	// DeviceID is the 32-bit device and vendor ID; 0 for a product name.
	DeviceID uint32
	// SubsystemID, with HasSubsystem, must also match.
	SubsystemID  uint32
	HasSubsystem bool
	// ProductName is set for a product-name filter.
	ProductName string
}

func (f Filter) String() string {
	switch {
	case f.ProductName != "":
		return f.ProductName
	case f.HasSubsystem:
		return fmt.Sprintf("0x%08X:0x%08X", f.DeviceID, f.SubsystemID)
	}
	return fmt.Sprintf("0x%08X", f.DeviceID)
}

// GPU is what entries select a GPU by.
type GPU struct {
	Index int
	// PCIDeviceID and PCISubsystemID are NVML's PciDeviceId and PciSubSystemId.
	PCIDeviceID    uint32
	PCISubsystemID uint32
	ProductName    string
}

// Matches says whether the filter selects g.
func (f Filter) Matches(g GPU) bool {
	if f.ProductName != "" {
		return strings.EqualFold(strings.TrimSpace(g.ProductName), f.ProductName)
	}
	if f.DeviceID != g.PCIDeviceID {
		return false
	}
	return !f.HasSubsystem || f.SubsystemID == g.PCISubsystemID
}

// Selects says whether the entry applies to g.
func (e Entry) Selects(g GPU) bool {
	if !e.AllDevices && !slices.Contains(e.Devices, g.Index) {
		return false
	}
	if len(e.DeviceFilter) == 0 {
		return true
	}
	return slices.ContainsFunc(e.DeviceFilter, func(f Filter) bool { return f.Matches(g) })
}

// Select is the entry of a layout that decides g's layout: as mig-parted applies the
// entries in order, the last one that selects g. ok is false when none does (the GPU is
// left as it is).
func Select(layout []Entry, g GPU) (e Entry, ok bool) {
	for _, x := range slices.Backward(layout) {
		if x.Selects(g) {
			return x, true
		}
	}
	return Entry{}, false
}

// Profiles lists the entry's MIG devices one per instance, largest first (by compute
// slices, then name): the order in which they are best placed. A parsed entry counts at
// most MaxInstancesPerGPU; of an entry built otherwise, at most that many are listed.
func (e Entry) Profiles() []string {
	var out []string
	for name, n := range e.MIGDevices {
		for range min(n, MaxInstancesPerGPU+1-len(out)) {
			out = append(out, name)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Or(cmp.Compare(slicesOf(b), slicesOf(a)), strings.Compare(a, b))
	})
	return out
}

// slicesOf is a profile name's GPU slice count ("3g.40gb": 3), 0 when unreadable.
func slicesOf(profile string) int {
	s := profile
	if i := strings.Index(s, "c."); i >= 0 && i < strings.Index(s, "g.") {
		s = s[i+2:]
	}
	n, _ := strconv.Atoi(s[:max(strings.Index(s, "g."), 0)])
	return n
}

// CheckIndexes refuses a layout whose entries name GPU indices that are not among a
// node's (indexes): such an entry would select nothing, and the layout would seem applied.
// name is the layout's name, for the error's field path.
func CheckIndexes(name string, layout []Entry, indexes []int) error {
	for k, e := range layout {
		for j, i := range e.Devices {
			if !slices.Contains(indexes, i) {
				return fmt.Errorf("mig-configs.%s[%d].devices[%d]: there is no GPU %d on this node; its GPU indices are %s",
					name, k, j, i, indexList(indexes))
			}
		}
	}
	return nil
}

func indexList(indexes []int) string {
	if len(indexes) == 0 {
		return "none"
	}
	out := make([]string, len(indexes))
	for k, i := range indexes {
		out[k] = strconv.Itoa(i)
	}
	return strings.Join(out, ", ")
}

// Names are the file's layout names, sorted.
func (f *File) Names() []string {
	out := make([]string, 0, len(f.Layouts))
	for name := range f.Layouts {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Layout returns the named layout, or an error listing the layouts there are.
func (f *File) Layout(name string) ([]Entry, error) {
	if l, ok := f.Layouts[name]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("no MIG layout %q; the layouts are %s", name, strings.Join(f.Names(), ", "))
}

// Parse reads a layout file (YAML or JSON).
func Parse(data []byte) (*File, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("the file is %d bytes; a layouts file is at most %d", len(data), MaxFileBytes)
	}
	if err := yamldoc.One(data, "a layouts file"); err != nil {
		return nil, err
	}
	raw, err := toJSON(data)
	if err != nil {
		return nil, err
	}
	top, err := object(raw, "the file")
	if err != nil {
		return nil, err
	}
	if err := onlyFields(top, "", "version", "mig-configs"); err != nil {
		return nil, err
	}
	f := &File{Layouts: map[string][]Entry{}}
	v, ok := top["version"]
	if !ok {
		return nil, fmt.Errorf("version: missing; the accepted version is %s", Version)
	}
	if err := json.Unmarshal(v, &f.Version); err != nil || f.Version != Version {
		return nil, fmt.Errorf("version: %s is not accepted; the accepted version is %s", v, Version)
	}
	mc, ok := top["mig-configs"]
	if !ok {
		return nil, fmt.Errorf("mig-configs: missing; it maps layout names to lists of entries")
	}
	configs, err := object(mc, "mig-configs")
	if err != nil {
		return nil, err
	}
	if len(configs) == 0 {
		return nil, fmt.Errorf("mig-configs: at least one layout is required")
	}
	if len(configs) > MaxLayouts {
		return nil, fmt.Errorf("mig-configs: %d layouts; a file has at most %d", len(configs), MaxLayouts)
	}
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		rawEntries := configs[name]
		path := "mig-configs." + name
		if name == "" {
			return nil, fmt.Errorf("mig-configs: a layout name is empty")
		}
		var list []json.RawMessage
		if err := json.Unmarshal(rawEntries, &list); err != nil {
			return nil, fmt.Errorf("%s: must be a list of entries, got %s", path, kindOf(rawEntries))
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("%s: at least one entry is required", path)
		}
		if len(list) > MaxEntries {
			return nil, fmt.Errorf("%s: %d entries; a layout has at most %d", path, len(list), MaxEntries)
		}
		for k, re := range list {
			e, err := parseEntry(re, fmt.Sprintf("%s[%d]", path, k))
			if err != nil {
				return nil, err
			}
			f.Layouts[name] = append(f.Layouts[name], e)
		}
	}
	return f, nil
}

func parseEntry(raw json.RawMessage, path string) (Entry, error) {
	m, err := object(raw, path)
	if err != nil {
		return Entry{}, err
	}
	if err := onlyFields(m, path, "device-filter", "devices", "mig-enabled", "mig-devices"); err != nil {
		return Entry{}, err
	}
	var e Entry
	for _, req := range []string{"devices", "mig-enabled"} {
		if _, ok := m[req]; !ok {
			return Entry{}, fmt.Errorf("%s.%s: missing (required)", path, req)
		}
	}
	if df, ok := m["device-filter"]; ok {
		if e.DeviceFilter, err = parseFilters(df, path+".device-filter"); err != nil {
			return Entry{}, err
		}
	}
	if e.AllDevices, e.Devices, err = parseDevices(m["devices"], path+".devices"); err != nil {
		return Entry{}, err
	}
	if err := json.Unmarshal(m["mig-enabled"], &e.MIGEnabled); err != nil {
		return Entry{}, fmt.Errorf("%s.mig-enabled: must be true or false, got %s", path, m["mig-enabled"])
	}
	md, hasDevices := m["mig-devices"]
	if hasDevices && !bytes.Equal(bytes.TrimSpace(md), []byte("null")) {
		if e.MIGDevices, err = parseMIGDevices(md, path+".mig-devices"); err != nil {
			return Entry{}, err
		}
	} else {
		hasDevices = false
	}
	switch {
	case e.MIGEnabled && !hasDevices:
		return Entry{}, fmt.Errorf("%s.mig-devices: missing; required with mig-enabled: true ({} for MIG mode without instances)", path)
	case !e.MIGEnabled && len(e.MIGDevices) > 0:
		return Entry{}, fmt.Errorf("%s.mig-devices: must be empty with mig-enabled: false", path)
	}
	return e, nil
}

func parseFilters(raw json.RawMessage, path string) ([]Filter, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		f, err := parseFilter(strings.TrimSpace(one))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return []Filter{f}, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: must be a PCI device ID or product name, or a list of them, got %s", path, kindOf(raw))
	}
	if len(list) > MaxListed {
		return nil, fmt.Errorf("%s: %d values; at most %d", path, len(list), MaxListed)
	}
	var out []Filter
	for k, r := range list {
		where := fmt.Sprintf("%s[%d]", path, k)
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, fmt.Errorf("%s: must be a string (quote PCI device IDs: \"0x233010DE\"), got %s", where, kindOf(r))
		}
		f, err := parseFilter(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, f)
	}
	return out, nil
}

func parseFilter(s string) (Filter, error) {
	if s == "" {
		return Filter{}, fmt.Errorf("empty; accepted are PCI device IDs such as 0x233010DE (with an optional :<subsystem ID>) and GPU product names such as \"NVIDIA H100 80GB HBM3\"")
	}
	if !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") {
		return Filter{ProductName: s}, nil
	}
	id, sub, hasSub := strings.Cut(s, ":")
	var f Filter
	v, err := parseID(id)
	if err != nil {
		return Filter{}, fmt.Errorf("%q: %w", s, err)
	}
	f.DeviceID = v
	if hasSub {
		if f.SubsystemID, err = parseID(sub); err != nil {
			return Filter{}, fmt.Errorf("%q: subsystem ID: %w", s, err)
		}
		f.HasSubsystem = true
	}
	return f, nil
}

func parseID(s string) (uint32, error) {
	if !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") {
		return 0, fmt.Errorf("a PCI ID is 0x and 8 hex digits (device, then vendor: 0x233010DE)")
	}
	v, err := strconv.ParseUint(s[2:], 16, 32)
	if err != nil || len(s) != 10 {
		return 0, fmt.Errorf("a PCI ID is 0x and 8 hex digits (device, then vendor: 0x233010DE)")
	}
	return uint32(v), nil
}

func parseDevices(raw json.RawMessage, path string) (all bool, list []int, err error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "all" {
			return false, nil, fmt.Errorf("%s: %q is not accepted; accepted are \"all\" and a list of GPU indices such as [0, 1]", path, s)
		}
		return true, nil, nil
	}
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil {
		return false, nil, fmt.Errorf("%s: must be \"all\" or a list of GPU indices such as [0, 1], got %s", path, kindOf(raw))
	}
	if len(nums) == 0 {
		return false, nil, fmt.Errorf("%s: the list of GPU indices is empty", path)
	}
	if len(nums) > MaxListed {
		return false, nil, fmt.Errorf("%s: %d GPU indices; at most %d", path, len(nums), MaxListed)
	}
	for k, n := range nums {
		i, err := strconv.Atoi(n.String())
		if err != nil || i < 0 || i > MaxGPUIndex {
			return false, nil, fmt.Errorf("%s[%d]: %s is not a GPU index (an integer from 0 to %d)", path, k, n, MaxGPUIndex)
		}
		if slices.Contains(list, i) {
			return false, nil, fmt.Errorf("%s[%d]: GPU %d is listed twice", path, k, i)
		}
		list = append(list, i)
	}
	return false, list, nil
}

func parseMIGDevices(raw json.RawMessage, path string) (map[string]int, error) {
	m, err := object(raw, path)
	if err != nil {
		return nil, err
	}
	names := nvdev.New(nil)
	out := map[string]int{}
	positive, total := false, 0
	for _, name := range slices.Sorted(maps.Keys(m)) {
		v := m[name]
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		count, cerr := 0, dec.Decode(&n)
		if cerr == nil {
			count, cerr = strconv.Atoi(n.String())
		}
		if cerr != nil || count < 0 {
			return nil, fmt.Errorf("%s.%s: the count must be an integer from 0 to %d, got %s", path, name, MaxInstancesPerGPU, v)
		}
		if count > MaxInstancesPerGPU {
			return nil, fmt.Errorf("%s.%s: %d instances; a GPU holds at most %d MIG instances", path, name, count, MaxInstancesPerGPU)
		}
		if total += count; total > MaxInstancesPerGPU {
			return nil, fmt.Errorf("%s: %d instances together; a GPU holds at most %d MIG instances", path, total, MaxInstancesPerGPU)
		}
		if err := names.AssertValidMigProfileFormat(name); err != nil {
			return nil, fmt.Errorf("%s: %q is not a MIG profile name (such as 1g.10gb, 1g.10gb+me, 1c.3g.40gb): %v", path, name, err)
		}
		if count > 0 {
			positive = true
			out[name] = count
		}
	}
	if len(m) > 0 && !positive {
		return nil, fmt.Errorf("%s: every count is 0; use {} for MIG mode without instances", path)
	}
	return out, nil
}

// object decodes a JSON object, refusing anything else.
func object(raw json.RawMessage, path string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("%s: must be a mapping, got %s", path, kindOf(raw))
	}
	return m, nil
}

// onlyFields refuses fields other than the accepted ones.
func onlyFields(m map[string]json.RawMessage, path string, accepted ...string) error {
	var unknown []string
	for k := range m {
		if !slices.Contains(accepted, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	where := unknown[0]
	if path != "" {
		where = path + "." + where
	}
	return fmt.Errorf("%s: unknown field; accepted fields are %s", where, strings.Join(accepted, ", "))
}

// kindOf names a JSON value's kind for error messages.
func kindOf(raw json.RawMessage) string {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "a mapping"
	case '[':
		return "a list"
	case '"':
		return "a string " + string(s)
	case 't', 'f':
		return "a boolean " + string(s)
	case 'n':
		return "null"
	}
	return "a number " + string(s)
}
