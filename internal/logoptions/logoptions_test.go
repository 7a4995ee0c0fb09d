package logoptions

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, args ...string) error {
	t.Helper()
	c := New()
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	AddFlags(c, fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	return Validate(c)
}

func TestFormatsAreTextAndJSON(t *testing.T) {
	for _, args := range [][]string{nil, {"--logging-format=text", "-v=5"}, {"--logging-format=json", "--v=3"}} {
		if err := parse(t, args...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	err := parse(t, "--logging-format=xml")
	if err == nil || !strings.Contains(err.Error(), `--logging-format="xml"`) || !strings.Contains(err.Error(), "text, json") {
		t.Errorf("--logging-format=xml: err %v, want one naming the flag and text, json", err)
	}
}

// TestJSONRefusesTextOnlyFlags: what component-base refuses is refused too.
func TestJSONRefusesTextOnlyFlags(t *testing.T) {
	if err := parse(t, "--logging-format=json", "--vmodule=driver=4"); err == nil || !strings.Contains(err.Error(), "vmodule") {
		t.Errorf("json with --vmodule: err %v, want one naming vmodule", err)
	}
}
