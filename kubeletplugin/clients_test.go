package kubeletplugin_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// The background writers (here a GPU health Event on the Node) go through the background
// client: the prepare client, with a rate limiter of its own, serves only what prepares
// and publishing need.
func TestBackgroundWritesUseTheBackgroundClient(t *testing.T) {
	background := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-a-uid"}})
	c := startOnCluster(t, newNode(t, "dgx-h100"), func(cfg *plugin.Config) { cfg.BackgroundClient = background })
	inject(t, c.n, 4, nvmlsim.XID(79))
	var events *corev1.EventList
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var err error
		if events, err = background.CoreV1().Events("").List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(events.Items) > 0 {
			break
		}
	}
	if len(events.Items) == 0 {
		t.Fatal("the GPU's health Event never reached the background client")
	}
	prepares := map[string]bool{"get nodes": true, "list resourceslices": true, "watch resourceslices": true,
		"create resourceslices": true, "update resourceslices": true, "delete resourceslices": true, "get resourceclaims": true}
	for _, a := range c.client.Actions() {
		if what := a.GetVerb() + " " + a.GetResource().Resource; !prepares[what] {
			t.Errorf("the prepare client was used to %s", what)
		}
	}
}
