package lab

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// fluidCRDFiles are the Fluid CRDs a lab with crds: [fluid] serves: a Dataset names cached
// data, a DataLoad asks Fluid to warm its cache. No Fluid controller runs, so nothing acts
// on them; gpudra reads Datasets' PersistentVolumes and creates DataLoads.
var fluidCRDFiles = []string{"data.fluid.io_datasets.yaml", "data.fluid.io_dataloads.yaml"}

// fluidCRDs reads fluidCRDFiles from dir and checks each holds one CRD of data.fluid.io.
func fluidCRDs(dir string) ([]*unstructured.Unstructured, error) {
	read := manifestReader(dir)
	var crds []*unstructured.Unstructured
	for _, f := range fluidCRDFiles {
		objs, err := read(f)
		if err != nil {
			return nil, err
		}
		if len(objs) != 1 || objs[0].GetKind() != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: want one CustomResourceDefinition, found %d objects", f, len(objs))
		}
		if g, _, _ := unstructured.NestedString(objs[0].Object, "spec", "group"); g != "data.fluid.io" {
			return nil, fmt.Errorf("%s: CRD of group %q, want data.fluid.io", f, g)
		}
		crds = append(crds, objs...)
	}
	return crds, nil
}

// applyFluidCRDs serves Fluid's CRDs and waits until they are Established.
func (u *upper) applyFluidCRDs(ctx context.Context) error {
	crds, err := fluidCRDs(u.tc.FluidCRDs)
	if err != nil {
		return &ComponentError{Component: "fluid", Err: fmt.Errorf("Fluid's CRDs in %s: %w", u.tc.FluidCRDs, err)}
	}
	_, err = u.applyWithCRDs(ctx, "fluid", "serving Fluid's CRDs", crds, nil)
	return err
}
