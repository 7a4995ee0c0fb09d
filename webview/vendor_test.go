package webview

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const nodeMixed = "gpu-node-mixed" // one NVIDIA L40S and one AMD MI210

// A mixed pool shows each GPU's vendor, and the vendor filter keeps a vendor's GPUs alone.
func TestPagesShowAndFilterVendors(t *testing.T) {
	f := newFixture(t)
	f.addKFDNode(t, nodeMixed, "mixed-l40s-mi210")

	var cluster struct{ Data ClusterPage }
	if err := json.Unmarshal([]byte(get(t, f.http.URL+"/?format=json", http.StatusOK)), &cluster); err != nil {
		t.Fatal(err)
	}
	models := map[string]string{}
	for _, m := range cluster.Data.Summary.Models {
		models[m.Model] = m.Vendor
	}
	if models["AMD Instinct MI210"] != api.VendorAMD || models["NVIDIA H100 80GB HBM3"] != api.VendorNVIDIA {
		t.Errorf("models by vendor %v, want the MI210 amd and the H100 nvidia", models)
	}
	for _, n := range cluster.Data.Nodes {
		want := []string{api.VendorNVIDIA}
		if n.Name == nodeMixed {
			want = []string{api.VendorNVIDIA, api.VendorAMD}
		}
		if !slices.Equal(n.Vendors, want) {
			t.Errorf("node %s has vendors %v, want %v", n.Name, n.Vendors, want)
		}
	}

	// ?vendor=AMD: the mixed node with its AMD GPU alone, counted alone.
	if err := json.Unmarshal([]byte(get(t, f.http.URL+"/?format=json&vendor=AMD", http.StatusOK)), &cluster); err != nil {
		t.Fatal(err)
	}
	d := cluster.Data
	if len(d.Nodes) != 1 || d.Nodes[0].Name != nodeMixed || len(d.Nodes[0].GPUs) != 1 || d.Nodes[0].GPUs[0].Vendor != api.VendorAMD ||
		d.Summary.GPUs != 1 || len(d.Summary.Models) != 1 || d.List.Vendor != api.VendorAMD {
		t.Errorf("vendor amd: nodes %+v, summary %+v, list %+v; want node %s with its one AMD GPU", d.Nodes, d.Summary, d.List, nodeMixed)
	}

	page := get(t, f.http.URL+"/?vendor=nvidia&limit=1", http.StatusOK)
	contains(t, page, `<td>NVIDIA</td><td>NVIDIA H100 80GB HBM3</td>`, `name="vendor" value="nvidia"`, `href="/?limit=1&amp;page=2&amp;vendor=nvidia"`)
	lacks(t, page, "AMD Instinct MI210")

	status, body := fetch(t, f.http.URL+"/?vendor=intel")
	if status != http.StatusBadRequest || !strings.Contains(body, `vendor &#34;intel&#34;: accepted values are nvidia, amd, hygon`) {
		t.Errorf("?vendor=intel: %d, want 400 naming the accepted vendors:\n%s", status, body)
	}

	node := get(t, f.http.URL+"/nodes/"+nodeMixed, http.StatusOK)
	contains(t, node, `<span class="badge">NVIDIA, AMD</span>`, `<td>AMD</td><td>AMD Instinct MI210</td>`)

	// The claim pages name the vendors: a pending claim's nodes and an allocated one's devices.
	twoAMD := wholeClaim("two-amd")
	twoAMD.Spec.Devices.Requests[0].Exactly.DeviceClassName = api.DeviceClassAMDGPU
	twoAMD.Spec.Devices.Requests[0].Exactly.Count = 2
	if _, err := f.kube.ResourceV1().ResourceClaims(testNS).Create(context.Background(), twoAMD, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		status, _ := fetch(t, f.http.URL+"/claims/team-a/two-amd")
		return status == http.StatusOK
	})
	claim := get(t, f.http.URL+"/claims/team-a/two-amd", http.StatusOK)
	contains(t, claim, `<th>Node</th><th>Vendor</th>`, `<a href="/nodes/`+nodeMixed+`">`+nodeMixed+`</a></td><td>NVIDIA, AMD</td>`,
		`<a href="/nodes/`+nodeA+`">`+nodeA+`</a></td><td>NVIDIA</td>`)
	contains(t, get(t, f.http.URL+"/claims/team-a/train-0-gpu", http.StatusOK), `/gpu-0 (NVIDIA)</td>`)
}
