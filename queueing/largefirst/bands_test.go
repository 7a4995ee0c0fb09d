package largefirst

import (
	"strings"
	"testing"
)

func TestParseBands(t *testing.T) {
	b, err := ParseBands("--large-jobs-first-bands", "16:gpudra-large, 64:gpudra-huge")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "16:gpudra-large,64:gpudra-huge" {
		t.Errorf("bands = %s", got)
	}
}

func TestBadBandsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        []string
	}{
		{name: "empty", value: "", want: []string{"is empty", "minGPUs:priorityClass"}},
		{name: "no colon", value: "16", want: []string{`entry "16" has no ':'`}},
		{name: "minGPUs not a number", value: "lots:gpudra-large", want: []string{`minGPUs "lots" is not a whole number`}},
		{name: "zero GPUs", value: "0:gpudra-small", want: []string{"minGPUs must be at least 1"}},
		{name: "negative GPUs", value: "-4:gpudra-small", want: []string{"minGPUs must be at least 1"}},
		{name: "descending", value: "64:gpudra-huge,16:gpudra-large", want: []string{"band 1 (16:gpudra-large)", "above the band before's 64"}},
		{name: "same minGPUs twice", value: "16:a,16:b", want: []string{"above the band before's 16"}},
		{name: "class not a name", value: "16:Large_Jobs", want: []string{`"Large_Jobs"`, "not a WorkloadPriorityClass name"}},
		{name: "empty class", value: "16:", want: []string{"not a WorkloadPriorityClass name"}},
		{name: "class twice", value: "16:big,64:big", want: []string{"priorityClass big is named twice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseBands("--large-jobs-first-bands", tc.value)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range append(tc.want, "--large-jobs-first-bands") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestBandForDemand(t *testing.T) {
	b := Bands{{MinGPUs: 16, PriorityClass: "gpudra-large"}, {MinGPUs: 64, PriorityClass: "gpudra-huge"}}
	for _, tc := range []struct {
		percent int64
		want    string
	}{
		{percent: 0, want: ""},
		{percent: 1599, want: ""},
		{percent: 1600, want: "gpudra-large"},
		{percent: 6399, want: "gpudra-large"},
		{percent: 6400, want: "gpudra-huge"},
		{percent: 100000, want: "gpudra-huge"},
	} {
		band, ok := b.For(tc.percent)
		if got := band.PriorityClass; got != tc.want || ok != (tc.want != "") {
			t.Errorf("For(%d) = %q, %v; want %q", tc.percent, got, ok, tc.want)
		}
	}
}
