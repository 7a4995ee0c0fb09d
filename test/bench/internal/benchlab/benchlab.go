// Package benchlab brings up the lab a benchmark describes, in the default lab folder.
package benchlab

import (
	"context"
	"os"
	"path/filepath"

	"github.com/gpudra/gpudra/lab"
)

// Up brings up a lab from the text of a lab file, printing progress to stderr. down tears
// it down, or does nothing when keep is set (the lab is left running for a look).
func Up(ctx context.Context, labFile string, keep bool) (state *lab.State, down func(), err error) {
	repo, err := lab.RepoRoot(".")
	if err != nil {
		return nil, nil, err
	}
	tmp, err := os.MkdirTemp("", "gpudra-bench-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	lf := filepath.Join(tmp, "lab.yaml")
	if err := os.WriteFile(lf, []byte(labFile), 0o600); err != nil {
		return nil, nil, err
	}
	dir := lab.DefaultDir()
	state, err = lab.Up(ctx, lab.Options{Dir: dir, Repo: repo, LabFile: lf, Progress: os.Stderr})
	if err != nil {
		return nil, nil, err
	}
	down = func() {
		if !keep {
			_ = lab.Down(lab.DownOptions{Dir: dir, Progress: os.Stderr})
		}
	}
	return state, down, nil
}
