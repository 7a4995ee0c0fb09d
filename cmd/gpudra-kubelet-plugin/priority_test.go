package main

import (
	"strings"
	"testing"

	"github.com/gpudra/gpudra/internal/logoptions"
)

func TestSharePriorityThresholdFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want *int32
	}{
		{nil, nil},
		{[]string{"--share-priority-threshold=1000"}, new(int32(1000))},
		{[]string{"--share-priority-threshold=0"}, new(int32(0))},
		{[]string{"--share-priority-threshold=-5"}, new(int32(-5))},
	} {
		f := flags{logging: logoptions.New()}
		cmd := newCommandFor(&f)
		if err := cmd.Flags().Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		got := givenOrNil(cmd.Flags(), sharePriorityFlag, f.sharePriorityThreshold)
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%v: threshold %v, want %v", tc.args, deref(got), deref(tc.want))
		}
	}
	f := flags{logging: logoptions.New()}
	err := newCommandFor(&f).Flags().Parse([]string{"--share-priority-threshold=high"})
	if err == nil || !strings.Contains(err.Error(), "share-priority-threshold") {
		t.Errorf("a threshold that is not a number: error %v, want one naming the flag", err)
	}
}

func deref(p *int32) any {
	if p == nil {
		return "unset"
	}
	return *p
}
