package driver_test

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
)

// The summary line lists device kinds by how many there are (most first), and speaks of one
// counter set in the singular.
func TestInspectSummaryOrdersKindsByCount(t *testing.T) {
	inv, _, err := simulated.Slices("dgx-h100", "n", driver.RenderOptions{MIG: driver.MIGDynamic})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := driver.Render(inv, driver.RenderOptions{MIG: driver.MIGDynamic})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := driver.WriteInventory(&out, inv, pool); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Publishes \d+ devices \(([^)]*)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary line:\n%s", out.String())
	}
	last := int(^uint(0) >> 1)
	for _, k := range regexp.MustCompile(`(\d+) [a-z-]+`).FindAllStringSubmatch(m[1], -1) {
		n, _ := strconv.Atoi(k[1])
		if n > last {
			t.Errorf("kinds not ordered by count: %s", m[1])
		}
		last = n
	}
	if regexp.MustCompile(`set\(s\)`).MatchString(out.String()) {
		t.Errorf("summary says set(s):\n%s", out.String())
	}
}

// An AMD node's inspection lists its XGMI groups (the MI250X pairs are its modules' two
// GCDs) and counts them among the devices it publishes.
func TestInspectListsXGMIGroups(t *testing.T) {
	inv, err := simulated.KFDInventory("mi250x-4", "n")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := driver.Render(inv, driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := driver.WriteInventory(&out, inv, pool); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"XGMI groups: {0,1} {2,3} {4,5} {6,7} {0,1,2,3} {4,5,6,7} {0,1,2,3,4,5,6,7}\n",
		"Publishes 15 devices (8 gpu, 7 xgmi-group)",
	} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("inspection lacks %q:\n%s", want, out.String())
		}
	}
}
