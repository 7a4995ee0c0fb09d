package yamldoc

import (
	"strings"
	"testing"
)

func TestOne(t *testing.T) {
	for _, tc := range []struct {
		in   string
		docs int
	}{
		{"a: 1\n", 1},
		{"---\na: 1\n---\n# trailing comment\n", 1},
		{"", 0},
		{"a: 1\n---\nb: 2\n", 2},
		{"a: 1\n---\n---\nb: 2\n---\nc: 3\n", 3},
		{"a: |\n  text with --- inside\n", 1},
	} {
		n, err := Count([]byte(tc.in))
		if err != nil || n != tc.docs {
			t.Errorf("Count(%q) = %d, %v; want %d", tc.in, n, err, tc.docs)
		}
		err = One([]byte(tc.in), "the file")
		if (err != nil) != (tc.docs > 1) {
			t.Errorf("One(%q) = %v", tc.in, err)
		}
		if err != nil && !strings.Contains(err.Error(), "the file is one YAML document") {
			t.Errorf("One(%q) error %q does not say what is one document", tc.in, err)
		}
	}
}
