package miglayout_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver/miglayout"
)

// hostileLayouts are inputs that once cost memory or time, or passed although wrong.
var hostileLayouts = []struct{ name, yaml, want string }{
	{"a huge count", entryWith(`mig-devices: {"1g.10gb": 2000000000}`),
		"mig-configs.x[0].mig-devices.1g.10gb: 2000000000 instances; a GPU holds at most 7 MIG instances"},
	{"a count beyond int64", entryWith(`mig-devices: {"1g.10gb": 99999999999999999999999}`),
		"mig-configs.x[0].mig-devices.1g.10gb: the count must be an integer from 0 to 7"},
	{"counts that add up beyond a GPU", entryWith(`mig-devices: {"1g.10gb": 4, "1g.10gb+me": 1, "2g.20gb": 3}`),
		"mig-configs.x[0].mig-devices: 8 instances together; a GPU holds at most 7 MIG instances"},
	{"many profiles of one instance each", entryWith(`mig-devices: {` + manyProfiles(9) + `}`),
		"instances together; a GPU holds at most 7 MIG instances"},
	{"a repeated entry key", "version: v1\nmig-configs:\n  x:\n  - devices: all\n    mig-enabled: false\n    mig-enabled: true\n",
		"mig-configs.x[0].mig-enabled: the key is given twice (lines 5 and 6)"},
	{"a repeated profile", entryWith(`mig-devices: {"1g.10gb": 1, "1g.10gb": 7}`),
		"mig-configs.x[0].mig-devices.1g.10gb: the key is given twice"},
	{"a repeated layout", "version: v1\nmig-configs:\n  x: [{devices: all, mig-enabled: false}]\n  x: [{devices: all, mig-enabled: true, mig-devices: {}}]\n",
		"mig-configs.x: the key is given twice"},
	{"a repeated key in JSON", `{"version": "v1", "version": "v1", "mig-configs": {}}`,
		"version: the key is given twice"},
	{"an alias", "version: v1\nmig-configs:\n  a: &e [{devices: all, mig-enabled: false}]\n  b: *e\n",
		"mig-configs.a: YAML anchors (&e) are not accepted"},
	{"a merge key", "version: v1\nmig-configs:\n  x:\n  - <<: {devices: all}\n    mig-enabled: false\n",
		"mig-configs.x[0]: YAML merge keys (<<) are not accepted"},
	{"a billion laughs", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
		"a: YAML anchors (&a) are not accepted"},
	{"deep nesting", "version: v1\nmig-configs: " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "\n",
		"nested more than 8 levels deep"},
	{"a list for a key", "version: v1\nmig-configs:\n  ? [a, b]\n  : [{devices: all, mig-enabled: false}]\n",
		"mig-configs: a key is a list"},
	{"a file too large", "version: v1\n#" + strings.Repeat("x", miglayout.MaxFileBytes) + "\n",
		"a layouts file is at most 1048576"},
	{"too many GPU indices", entryWith("devices: [" + indexList(65) + "]"),
		"mig-configs.x[0].devices: 65 GPU indices; at most 64"},
	{"a GPU index beyond any node", entryWith("devices: [2147483648]"),
		"mig-configs.x[0].devices[0]: 2147483648 is not a GPU index (an integer from 0 to 1023)"},
	{"a count that is not a number", entryWith(`mig-devices: {"1g.10gb": .nan}`),
		"mig-configs.x[0].mig-devices.1g.10gb: the count must be an integer from 0 to 7, got \".nan\""},
	{"too many entries", "version: v1\nmig-configs:\n  x:\n" + strings.Repeat("  - {devices: all, mig-enabled: false}\n", 65),
		"mig-configs.x: 65 entries; a layout has at most 64"},
}

// entryWith is a one-entry layout x whose entry has field (replacing its default).
func entryWith(field string) string {
	fields := map[string]string{"devices": "devices: all", "mig-enabled": "mig-enabled: true", "mig-devices": `mig-devices: {"1g.10gb": 1}`}
	name, _, _ := strings.Cut(field, ":")
	fields[name] = field
	return "version: v1\nmig-configs:\n  x:\n  - " + fields["devices"] + "\n    " + fields["mig-enabled"] + "\n    " + fields["mig-devices"] + "\n"
}

func manyProfiles(n int) string {
	var out []string
	for _, p := range []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.5gb", "2g.10gb", "3g.20gb"}[:n] {
		out = append(out, `"`+p+`": 1`)
	}
	return strings.Join(out, ", ")
}

func indexList(n int) string {
	var out []string
	for k := range n {
		out = append(out, strconv.Itoa(k))
	}
	return strings.Join(out, ", ")
}

func TestHostileLayoutFilesAreRefusedWithTheField(t *testing.T) {
	for _, tc := range hostileLayouts {
		t.Run(tc.name, func(t *testing.T) {
			_, err := miglayout.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckIndexesRefusesGPUsTheNodeLacks(t *testing.T) {
	f, err := miglayout.Parse([]byte("version: v1\nmig-configs:\n  x:\n  - {devices: all, mig-enabled: false}\n  - {devices: [7, 8, 99], mig-enabled: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	layout, _ := f.Layout("x")
	eight := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		name string
		gpus []int
		want string
	}{
		{"an 8-GPU node lacks GPU 8", eight, "mig-configs.x[1].devices[1]: there is no GPU 8 on this node; its GPU indices are 0, 1, 2, 3, 4, 5, 6, 7"},
		{"a node with more GPUs lacks GPU 99", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "mig-configs.x[1].devices[2]: there is no GPU 99"},
		{"a node without GPUs", nil, "its GPU indices are none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := miglayout.CheckIndexes("x", layout, tc.gpus)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if err := miglayout.CheckIndexes("x", layout, append(eight, 8, 99)); err != nil {
		t.Errorf("a node with every GPU the layout names: %v", err)
	}
}

func TestKeysAreKeptAsWritten(t *testing.T) {
	// YAML 1.1 reads 1 and 01, or on and true, as one key; a layout lost that way would be
	// a silent wrong answer.
	f, err := miglayout.Parse([]byte("version: v1\nmig-configs:\n  1: [{devices: all, mig-enabled: false}]\n  01: [{devices: [0], mig-enabled: false}]\n  on: [{devices: all, mig-enabled: false}]\n  true: [{devices: all, mig-enabled: false}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Names(), []string{"01", "1", "on", "true"}; !slices.Equal(got, want) {
		t.Errorf("layouts %v, want %v", got, want)
	}
}
