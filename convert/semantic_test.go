package convert

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
)

// doc is one object of a YAML stream, decoded generically.
type doc struct {
	raw []byte
	obj map[string]any
}

func (d doc) kind() string { s, _ := d.obj["kind"].(string); return s }

func (d doc) name() string {
	m, _ := d.obj["metadata"].(map[string]any)
	ns, _ := m["namespace"].(string)
	n, _ := m["name"].(string)
	return d.kind() + " " + ns + "/" + n
}

func splitDocs(t *testing.T, data []byte) []doc {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []doc
	for {
		b, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if m != nil {
			out = append(out, doc{raw: b, obj: m})
		}
	}
}

// claimSpec returns the claim spec of a ResourceClaim or ResourceClaimTemplate.
func claimSpec(t *testing.T, d doc) (resourceapi.ResourceClaimSpec, bool) {
	t.Helper()
	spec, _ := d.obj["spec"].(map[string]any)
	switch d.kind() {
	case "ResourceClaim":
	case "ResourceClaimTemplate":
		spec, _ = spec["spec"].(map[string]any)
	default:
		return resourceapi.ResourceClaimSpec{}, false
	}
	if d.obj["apiVersion"] == "resource.k8s.io/v1beta1" {
		spec = v1beta1ToV1(spec)
	}
	b, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := allocation.ParseClaimSpec(b)
	if err != nil {
		t.Fatalf("%s: %v", d.name(), err)
	}
	return s, true
}

// v1beta1ToV1 moves a v1beta1 request's fields into exactly, as the API server's
// conversion does.
func v1beta1ToV1(spec map[string]any) map[string]any {
	devices, _ := spec["devices"].(map[string]any)
	reqs, _ := devices["requests"].([]any)
	for i, r := range reqs {
		req, _ := r.(map[string]any)
		if _, flat := req["deviceClassName"]; !flat {
			continue
		}
		exact := map[string]any{}
		for k, v := range req {
			if k != "name" && k != "firstAvailable" {
				exact[k] = v
				delete(req, k)
			}
		}
		req["exactly"] = exact
		reqs[i] = req
	}
	return spec
}

// requestClasses lists the DeviceClasses a claim's requests and subrequests name.
func requestClasses(s resourceapi.ResourceClaimSpec) []string {
	var out []string
	for _, r := range s.Devices.Requests {
		if r.Exactly != nil {
			out = append(out, r.Exactly.DeviceClassName)
		}
		for _, sub := range r.FirstAvailable {
			out = append(out, sub.DeviceClassName)
		}
	}
	return out
}

func requestSelectors(r resourceapi.DeviceRequest) (class string, sels []resourceapi.DeviceSelector) {
	if r.Exactly != nil {
		return r.Exactly.DeviceClassName, r.Exactly.Selectors
	}
	return "", nil
}

type simNode struct {
	name   string
	slices []*resourceapi.ResourceSlice
}

// simNodes are the simulated nodes converted claims are allocated on: MIG-capable A100s
// and H100s publishing every kind of device (dynamic MIG).
func simNodes(t *testing.T) []simNode {
	t.Helper()
	var out []simNode
	for _, p := range []string{"dgx-a100", "dgx-h100"} {
		_, slices, err := simulated.Slices(p, "node-"+p, driver.RenderOptions{MIG: driver.MIGDynamic})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, simNode{"node-" + p, slices})
	}
	return out
}

// converted is a claim of the output that asks gpudra for devices.
type converted struct {
	doc  doc
	spec resourceapi.ResourceClaimSpec
}

// TestConvertedClaimsWorkOnGpudra checks every claim the golden cases convert against
// gpudra itself: its DeviceClasses exist (shipped, or converted in the same output), no
// name of NVIDIA's GPU driver is left in it, its selectors compile and evaluate without
// error on every device of its class on simulated nodes, its configs pass gpudra's
// decoding and validation, and Kubernetes' structured allocator allocates it.
func TestConvertedClaimsWorkOnGpudra(t *testing.T) {
	shipped, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	nodes := simNodes(t)
	checked := 0
	for _, g := range goldenCases {
		t.Run(g.name(), func(t *testing.T) {
			_, res := g.run(t)
			out := splitDocs(t, res.Output)
			classes := map[string]*resourceapi.DeviceClass{}
			for _, dc := range shipped {
				classes[dc.Name] = dc
			}
			for _, d := range out {
				if d.kind() != "DeviceClass" || !strings.Contains(string(d.raw), `"`+api.DriverName+`"`) && !strings.Contains(string(d.raw), `'`+api.DriverName+`'`) {
					continue
				}
				var dc resourceapi.DeviceClass
				if err := yaml.UnmarshalStrict(d.raw, &dc); err != nil {
					t.Fatal(err)
				}
				if _, clash := classes[dc.Name]; !clash {
					classes[dc.Name] = &dc
				}
			}
			var claims []converted
			for _, d := range out {
				spec, ok := claimSpec(t, d)
				if !ok {
					continue
				}
				gpudra := false
				for _, cl := range requestClasses(spec) {
					gpudra = gpudra || classes[cl] != nil
				}
				if !gpudra {
					continue
				}
				claims = append(claims, converted{d, spec})
			}
			for _, c := range claims {
				checked++
				checkClaim(t, c, classes, nodes)
			}
		})
	}
	if checked < 15 {
		t.Errorf("checked %d converted claims; the golden cases convert more", checked)
	}
}

func checkClaim(t *testing.T, c converted, classes map[string]*resourceapi.DeviceClass, nodes []simNode) {
	t.Helper()
	who := c.doc.name()
	for _, cl := range requestClasses(c.spec) {
		if classes[cl] == nil && !nvComputeDomainClasses[cl] {
			t.Errorf("%s: DeviceClass %s is not one of gpudra's", who, cl)
		}
	}
	specJSON, _ := yaml.Marshal(c.spec)
	for _, l := range []string{nvDriver + `"`, nvDriver + `'`, nvDriver + "/", "resource.nvidia.com"} {
		if strings.Contains(string(specJSON), l) {
			t.Errorf("%s: still names %s:\n%s", who, strings.Trim(l, `"'/`), specJSON)
		}
	}
	for i, cfg := range c.spec.Devices.Config {
		if cfg.Opaque == nil || cfg.Opaque.Driver != api.DriverName {
			continue
		}
		if err := api.ValidateOpaque(cfg.Opaque.Parameters.Raw, nil); err != nil {
			t.Errorf("%s: config[%d]: %v", who, i, err)
		}
	}

	compiler := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true})
	compile := func(expr string) dracel.CompilationResult {
		r := compiler.CompileCELExpression(expr, dracel.Options{})
		if r.Error != nil {
			t.Fatalf("%s: %q does not compile: %v", who, expr, r.Error)
		}
		return r
	}
	for _, r := range c.spec.Devices.Requests {
		class, sels := requestSelectors(r)
		dc := classes[class]
		if dc == nil {
			continue
		}
		evaluated := 0
		for _, n := range nodes {
			for _, s := range n.slices {
				for _, dev := range s.Spec.Devices {
					in := dracel.Device{Driver: s.Spec.Driver, Attributes: dev.Attributes, Capacity: dev.Capacity, AllowMultipleAllocations: dev.AllowMultipleAllocations}
					inClass := true
					for _, cs := range dc.Spec.Selectors {
						ok, _, err := compile(cs.CEL.Expression).DeviceMatches(context.Background(), in)
						if err != nil {
							t.Fatalf("class %s on %s: %v", class, dev.Name, err)
						}
						inClass = inClass && ok
					}
					if !inClass {
						continue
					}
					for _, sel := range sels {
						if _, _, err := compile(sel.CEL.Expression).DeviceMatches(context.Background(), in); err != nil {
							t.Errorf("%s: request %s: %q on device %s of class %s: %v", who, r.Name, sel.CEL.Expression, dev.Name, class, err)
						}
						evaluated++
					}
				}
			}
		}
		if len(sels) > 0 && evaluated == 0 {
			t.Errorf("%s: request %s: no simulated device of class %s to evaluate its selectors on", who, r.Name, class)
		}
	}

	// Allocation: on one of the simulated nodes, with nothing else allocated.
	var list []*resourceapi.DeviceClass
	for _, dc := range classes {
		list = append(list, dc)
	}
	sort.Slice(list, func(a, b int) bool { return list[a].Name < list[b].Name })
	var why []string
	for _, n := range nodes {
		// Requests for NVIDIA's compute-domain driver stay; allocate the gpudra part.
		spec := c.spec.DeepCopy()
		var reqs []resourceapi.DeviceRequest
		for _, r := range spec.Devices.Requests {
			if r.Exactly != nil && nvComputeDomainClasses[r.Exactly.DeviceClassName] {
				continue
			}
			reqs = append(reqs, r)
		}
		spec.Devices.Requests = reqs
		claim := &resourceapi.ResourceClaim{Spec: *spec}
		claim.Name, claim.Namespace, claim.UID = "converted", "default", types.UID("uid-converted")
		st := allocation.New(list, n.slices)
		results, err := st.Allocate(context.Background(), n.name, claim)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", n.name, err))
			continue
		}
		checkAllocation(t, who, c.spec, results[0])
		return
	}
	t.Errorf("%s does not allocate on any simulated node: %s\n%s", who, strings.Join(why, "; "), c.doc.raw)
}

// checkAllocation checks what the allocation says about the claim's intent: MIG devices
// under a parentUUID constraint share their GPU, and a share consumes what it asked for.
func checkAllocation(t *testing.T, who string, spec resourceapi.ResourceClaimSpec, r resourceapi.AllocationResult) {
	t.Helper()
	for _, con := range spec.Devices.Constraints {
		if con.MatchAttribute == nil || string(*con.MatchAttribute) != api.DriverName+"/"+api.AttrParentUUID {
			continue
		}
		parents := map[string]bool{}
		for _, d := range r.Devices.Results {
			parent, _, _ := strings.Cut(d.Device, "-mig-")
			parents[parent] = true
		}
		if len(parents) != 1 {
			t.Errorf("%s: MIG devices on GPUs %v, want one GPU", who, parents)
		}
	}
	for _, req := range spec.Devices.Requests {
		if req.Exactly == nil || req.Exactly.DeviceClassName != api.DeviceClassShare || req.Exactly.Capacity == nil {
			continue
		}
		want := req.Exactly.Capacity.Requests[api.CapMemory]
		for _, d := range r.Devices.Results {
			if d.Request != req.Name {
				continue
			}
			got, ok := d.ConsumedCapacity[api.CapMemory]
			if !ok || got.Cmp(want) != 0 {
				t.Errorf("%s: share %s consumed memory %v, want %s", who, d.Device, d.ConsumedCapacity, want.String())
			}
		}
	}
}

// TestSharesFitTogether allocates the converted 4Gi share template once per replica of
// its Deployment and more: many claims fit on one GPU, as they did with NVIDIA's
// consumable shares.
func TestSharesFitTogether(t *testing.T) {
	g := goldenCase{input: "memory-shares"}
	_, res := g.run(t)
	var spec resourceapi.ResourceClaimSpec
	for _, d := range splitDocs(t, res.Output) {
		if d.kind() == "ResourceClaimTemplate" {
			spec, _ = claimSpec(t, d)
		}
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	_, slices, err := simulated.Slices("dgx-a100", "node-a", driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := allocation.New(classes, slices)
	// 40Gi per GPU: ten 4Gi shares on the first.
	perGPU := map[string]int{}
	for i := 0; i < 12; i++ {
		claim := &resourceapi.ResourceClaim{Spec: *spec.DeepCopy()}
		claim.Name, claim.Namespace, claim.UID = fmt.Sprintf("share-%d", i), "default", types.UID(fmt.Sprintf("uid-share-%d", i))
		results, err := st.AllocateAndCommit(context.Background(), "node-a", claim)
		if err != nil {
			t.Fatalf("share %d: %v", i, err)
		}
		for _, d := range results[0].Devices.Results {
			perGPU[d.Device]++
		}
	}
	max := 0
	for _, n := range perGPU {
		if n > max {
			max = n
		}
	}
	if max < 2 {
		t.Errorf("shares per device %v: no GPU holds two", perGPU)
	}
	mem := resource.MustParse("40Gi")
	if int64(max)*4 > mem.Value()>>30 {
		t.Errorf("shares per device %v: more 4Gi shares than a 40Gi GPU holds", perGPU)
	}
}

// What could not be converted is left exactly as it was.
func TestUnconvertedObjectsAreUnchanged(t *testing.T) {
	for _, name := range []string{"unconvertible", "compute-domain"} {
		g := goldenCase{input: name}
		in, res := g.run(t)
		inDocs, outDocs := splitDocs(t, in), splitDocs(t, res.Output)
		if len(inDocs) != len(outDocs) {
			t.Fatalf("%s: %d documents in, %d out", name, len(inDocs), len(outDocs))
		}
		for i := range inDocs {
			changed := false
			for _, e := range res.Entries {
				if e.Object == objectID(inDocs[i]) && e.Level == Converted {
					changed = true
				}
			}
			if !changed && !reflect.DeepEqual(inDocs[i].obj, outDocs[i].obj) {
				t.Errorf("%s: %s changed though nothing of it was converted:\n%s", name, inDocs[i].name(), outDocs[i].raw)
			}
		}
		if res.Count(NotConverted) == 0 {
			t.Errorf("%s: nothing reported as not converted", name)
		}
	}
}

func objectID(d doc) string {
	m, _ := d.obj["metadata"].(map[string]any)
	ns, _ := m["namespace"].(string)
	n, _ := m["name"].(string)
	if ns != "" {
		n = ns + "/" + n
	}
	return d.kind() + " " + n
}

// The ComputeDomain, its channel's claim and the pod's use of the channel are each
// reported; the GPU beside them converts.
func TestComputeDomainIsReported(t *testing.T) {
	_, res := goldenCase{input: "compute-domain"}.run(t)
	want := map[string]bool{
		"ComputeDomain demo-cd/nvl-domain":      false,
		"ResourceClaim demo-cd/default-channel": false,
		"StatefulSet demo-cd/nvbandwidth":       false,
	}
	for _, e := range res.Entries {
		if _, ok := want[e.Object]; ok && e.Level == NotConverted {
			want[e.Object] = true
		}
	}
	for o, seen := range want {
		if !seen {
			t.Errorf("%s is not reported as not converted", o)
		}
	}
	if res.Count(Converted) == 0 {
		t.Errorf("the GPU claim template beside the ComputeDomain was not converted")
	}
}

// Without --claims, a device-plugin limit is kept exactly when one of gpudra's shipped
// DeviceClasses has it as its extendedResourceName, and reported otherwise.
func TestKeptLimitsAgreeWithShippedClasses(t *testing.T) {
	in := []byte(`apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  containers:
  - name: a
    image: x
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/mig-1g.10gb: 1, nvidia.com/mig-3g.20gb: 1, nvidia.com/mig-1g.5gb.me: 2}}
`)
	res, err := Convert(in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	ext := map[string]string{}
	for _, dc := range shipped {
		if dc.Spec.ExtendedResourceName != nil {
			ext[*dc.Spec.ExtendedResourceName] = dc.Name
		}
	}
	if len(res.Entries) != 4 {
		t.Fatalf("want an entry per limit, got %v", res.Entries)
	}
	for _, e := range res.Entries {
		r := e.Path[strings.LastIndex(e.Path, "[")+1 : len(e.Path)-1]
		_, served := ext[r]
		if served != (e.Level == Kept) {
			t.Errorf("%s: %s, and served by a shipped class: %v", r, e.Level, served)
		}
		if e.Level == Kept && !strings.Contains(e.Message, ext[r]) {
			t.Errorf("%s: the report does not name class %s: %s", r, ext[r], e.Message)
		}
	}
	if !bytes.Equal(res.Output, in) {
		t.Errorf("limits were changed without --claims:\n%s", res.Output)
	}
}
