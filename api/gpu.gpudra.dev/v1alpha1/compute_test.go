package v1alpha1_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestComputePercent(t *testing.T) {
	path := field.NewPath("spec", "devices", "requests").Index(0).Child("exactly", "capacity", "requests").Key("compute")
	for _, tc := range []struct {
		name, quantity string
		want           int // -1: refused
	}{
		{"no compute", "0", 0},
		{"a share of the SMs", "30", 30},
		{"all of the SMs", "100", 100},
		{"a fraction rounds up", "0.5", 1},
		{"just above all of the SMs", "101", -1},
		{"a negative request", "-1", -1},
		{"a request past int64 that would wrap to 30", "18446744073709551646", -1},
		{"a request of 1e30", "1e30", -1},
		{"an exabyte-sized suffix", "8Ei", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := api.ComputePercent(path, resource.MustParse(tc.quantity))
			if tc.want < 0 {
				if err == nil || !strings.Contains(err.Error(), "requests[compute]") || !strings.Contains(err.Error(), "from 0 to 100") {
					t.Errorf("compute %s: %d, %v; want an error naming the field and the accepted range", tc.quantity, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("compute %s: %d, %v; want %d", tc.quantity, got, err, tc.want)
			}
		})
	}
}
