package deployments_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/webhook"
)

// Every example claim passes the config webhook, as it must to be created in a cluster.
func TestExampleClaimsPassTheConfigWebhook(t *testing.T) {
	objs, err := readObjects(filepath.Join("examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	claims := 0
	for _, o := range objs {
		kind := o.GetKind()
		if kind != "ResourceClaim" && kind != "ResourceClaimTemplate" {
			continue
		}
		claims++
		raw, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		resp := webhook.Handler{}.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create,
			Kind:      metav1.GroupVersionKind{Group: resourceapi.GroupName, Version: "v1", Kind: kind},
			Object:    runtime.RawExtension{Raw: raw},
		}})
		if !resp.Allowed {
			t.Errorf("%s %s is refused: %s", kind, o.GetName(), resp.Result.Message)
		}
	}
	if claims < 5 {
		t.Fatalf("found %d example claims", claims)
	}
}

// The tier examples say what the docs say: one claim per tier, with the request each needs.
func TestShareTierExamples(t *testing.T) {
	objs, err := readObjects(filepath.Join("examples", "share-tiers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[string]string{}
	for _, o := range objs {
		if o.GetKind() != "ResourceClaim" {
			continue
		}
		raw, _ := json.Marshal(o.Object)
		var c resourceapi.ResourceClaim
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Limits struct{ Policy string }
		}
		if err := sigsyaml.Unmarshal(c.Spec.Devices.Config[0].Opaque.Parameters.Raw, &cfg); err != nil {
			t.Fatal(err)
		}
		tiers[cfg.Limits.Policy] = c.Name
	}
	for _, p := range []string{"Fixed", "Guaranteed", "BestEffort"} {
		if !strings.Contains(tiers[p], "share") {
			t.Errorf("no example claim for policy %s (have %v)", p, tiers)
		}
	}
}

// readObjects reads every YAML document of the files glob matches.
func readObjects(glob string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("%s: no files (%v)", glob, err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := yaml.NewYAMLReader(bufioReader(data))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			var o unstructured.Unstructured
			if err := sigsyaml.Unmarshal(doc, &o.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(o.Object) > 0 {
				out = append(out, &o)
			}
		}
	}
	return out, nil
}
