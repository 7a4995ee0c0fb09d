package validate

import (
	"os"
	"path/filepath"
	"testing"
)

// Check never panics, and a file it finds nothing wrong with names what it checked.
func FuzzCheck(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	node, err := OpenNode("dgx-h100")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res := Check(data, Options{Node: node})
		if len(res.Problems) == 0 && len(res.Documents) == 0 {
			t.Fatalf("no problem and no document in %q", data)
		}
	})
}
