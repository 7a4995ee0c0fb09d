package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFluidCRDs(t *testing.T, datasets, dataloads string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{"data.fluid.io_datasets.yaml": datasets, "data.fluid.io_dataloads.yaml": dataloads} {
		if data == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func fluidCRD(plural, group string) string {
	return "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: " + plural + "." + group + "}\nspec: {group: " + group + "}\n"
}

// The lab serves Fluid's Dataset and DataLoad CRDs as its module ships them, and says which
// file is wrong when one is missing or holds something else.
func TestFluidCRDsAreTheDatasetAndDataLoadOfFluid(t *testing.T) {
	crds, err := fluidCRDs(writeFluidCRDs(t, fluidCRD("datasets", "data.fluid.io"), fluidCRD("dataloads", "data.fluid.io")))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range crds {
		names = append(names, c.GetName())
	}
	if got := strings.Join(names, ","); got != "datasets.data.fluid.io,dataloads.data.fluid.io" {
		t.Errorf("CRDs %s, want datasets and dataloads of data.fluid.io", got)
	}

	for name, tc := range map[string]struct{ datasets, dataloads, want string }{
		"missing file": {fluidCRD("datasets", "data.fluid.io"), "", "data.fluid.io_dataloads.yaml"},
		"other group":  {fluidCRD("datasets", "example.com"), fluidCRD("dataloads", "data.fluid.io"), `data.fluid.io_datasets.yaml: CRD of group "example.com"`},
		"not a CRD":    {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", fluidCRD("dataloads", "data.fluid.io"), "data.fluid.io_datasets.yaml: want one CustomResourceDefinition"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := fluidCRDs(writeFluidCRDs(t, tc.datasets, tc.dataloads))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want it to name %q", err, tc.want)
			}
		})
	}
}
