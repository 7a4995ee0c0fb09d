package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/webview"
)

// The web view's pod page and gpudra explain say the same thing for the same cluster: the
// same nodes ruled out by the scheduler's filters, the same fit counts and reasons.
func TestExplainAndWebViewAgree(t *testing.T) {
	// r1-real is tainted; l40s-b is not and has room.
	objs := realNode(t, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{realNodeTaint} })
	_, sl, err := simulated.Slices("l40s-pcie", "l40s-b", driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sl {
		objs = append(objs, s)
	}
	second := realNode(t, nil)
	for _, o := range second {
		if n, ok := o.(*corev1.Node); ok {
			n = n.DeepCopy()
			n.Name, n.Labels["kubernetes.io/hostname"] = "l40s-b", "l40s-b"
			objs = append(objs, n)
		}
	}
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpus",
		Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 3}}}}}
	objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "three-gpus", UID: "c3"}, Spec: spec})
	objs = append(objs, gpuPod(func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "more", ResourceClaimName: ptr.To("three-gpus")})
	}))
	kube := fake.NewClientset(objs...)

	rep, err := buildReport(context.Background(), &clients{kube: kube}, topology.DefaultLabelKeys, "ml", "pod", "trainer")
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := printReport(&text, rep, "", 5); err != nil {
		t.Fatal(err)
	}

	srv, err := webview.New(webview.Options{Kube: kube})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var page struct{ Data webview.Explain }
	resp, err := http.Get(hs.URL + "/pods/ml/trainer?format=json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(page.Data.Pod, rep.Pod) {
		t.Errorf("node filters differ:\nweb view %+v\nexplain  %+v", page.Data.Pod, rep.Pod)
	}
	if len(page.Data.Claims) != 2 || !reflect.DeepEqual(page.Data.Claims, rep.Claims) {
		t.Errorf("claims differ:\nweb view %+v\nexplain  %+v", page.Data.Claims, rep.Claims)
	}
	resp, err = http.Get(hs.URL + "/pods/ml/trainer")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	html := string(body)
	for _, c := range rep.Claims {
		// "fits on 1 of 2 nodes" in both.
		phrase := "fits on " + strconv.Itoa(c.FitsOn) + " of " + strconv.Itoa(len(c.Nodes)) + " nodes"
		if !strings.Contains(text.String(), phrase) || !strings.Contains(html, phrase) {
			t.Errorf("claim %s: %q not in both:\n%s\n%s", c.Name, phrase, text.String(), html)
		}
	}
	if out := rep.Pod.RuledOut(); len(out) != 1 || out[0].Node != "r1-real" || rep.Claims[0].FitsOn != 1 {
		t.Errorf("want r1-real ruled out by its taint and one-gpu fitting on l40s-b only: %+v", rep)
	}
}
