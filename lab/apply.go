package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// fieldManager owns what the lab applies.
const fieldManager = "gpudra-lab"

// Applier applies manifests with server-side apply, as `kubectl apply --server-side` does.
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	// Namespace is where namespaced objects without one go (empty: default), as a helm
	// release's namespace is for its chart's objects.
	Namespace string
}

// NewApplier returns an Applier for the cluster of cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newApplier(dc, dyn), nil
}

func newApplier(dc discovery.DiscoveryInterface, dyn dynamic.Interface) *Applier {
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// Apply applies objs in order. A kind the API server does not know yet (a CRD created a moment
// ago) is looked up again once. After a new Namespace it waits for the namespace's default
// ServiceAccount, without which the API server refuses pods.
func (a *Applier) Apply(ctx context.Context, objs ...*unstructured.Unstructured) error {
	for _, o := range objs {
		if err := a.apply(ctx, o); err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), objectName(o), err)
		}
		if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" {
			if err := a.waitDefaultServiceAccount(ctx, o.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *Applier) waitDefaultServiceAccount(ctx context.Context, ns string) error {
	sa := a.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace(ns)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := sa.Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s has no default ServiceAccount after a minute (is kube-controller-manager running?)", ns)
	}
	return nil
}

func (a *Applier) apply(ctx context.Context, o *unstructured.Unstructured) error {
	ri, err := a.resource(o)
	if err != nil {
		return err
	}
	data, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTrue()})
	return err
}

// Missing is those of objs that the cluster does not hold yet.
func (a *Applier) Missing(ctx context.Context, objs ...*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var missing []*unstructured.Unstructured
	for _, o := range objs {
		ri, err := a.resource(o)
		if err == nil {
			_, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		}
		switch {
		case isNotFound(err) || meta.IsNoMatchError(err):
			missing = append(missing, o)
		case err != nil:
			return nil, fmt.Errorf("get %s %s: %w", o.GetKind(), objectName(o), err)
		}
	}
	return missing, nil
}

// Delete deletes objs, ignoring those already gone. What they own (a Job's pods) is deleted
// in the background, as kubectl does.
func (a *Applier) Delete(ctx context.Context, objs ...*unstructured.Unstructured) error {
	var errs []error
	bg := metav1.DeletePropagationBackground
	for _, o := range objs {
		ri, err := a.resource(o)
		if err == nil {
			err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg})
		}
		if err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", o.GetKind(), objectName(o), err))
		}
	}
	return errors.Join(errs...)
}

func (a *Applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := o.GetNamespace()
		if ns == "" {
			ns = a.Namespace
		}
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		return a.dyn.Resource(m.Resource).Namespace(ns), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetName()
}

func ptrTrue() *bool { t := true; return &t }

// DecodeManifests splits multi-document YAML (or JSON) into objects, skipping empty documents.
// Whole numbers are int64, as in objects read from the API server (unstructured.NestedInt64
// reads a Job's parallelism).
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue // an empty document
		}
		var m map[string]any
		if err := utiljson.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "List" {
			items, _, _ := unstructured.NestedSlice(m, "items")
			for _, it := range items {
				if im, ok := it.(map[string]any); ok {
					out = append(out, &unstructured.Unstructured{Object: im})
				}
			}
			continue
		}
		out = append(out, u)
	}
}

// ReadManifests reads the objects of every .yaml/.yml file in dir (sorted by file name) or of
// one file.
func ReadManifests(path string) ([]*unstructured.Unstructured, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if info.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		sort.Strings(files)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}
