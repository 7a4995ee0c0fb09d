package release

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// stage is what a Dockerfile's stage says about its image.
type stage struct {
	name, user string
	entrypoint []string
	copies     map[string]string // destination → source
}

// dockerfile is a Dockerfile's stages and, for each binary its go build commands build,
// whether they build it with cgo ("1" or "0").
func parseDockerfile(t *testing.T, data string) ([]stage, map[string]string) {
	t.Helper()
	var stages []stage
	cgo := map[string]string{}
	// Instructions continue on the next line after a trailing backslash.
	joined := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(data, " ")
	cmdTarget := regexp.MustCompile(`\./cmd/([a-z0-9-]+)`)
	for _, line := range strings.Split(joined, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			name := ""
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				name = f[3]
			}
			stages = append(stages, stage{name: name, copies: map[string]string{}})
		case "USER":
			stages[len(stages)-1].user = f[1]
		case "ENTRYPOINT":
			var ep []string
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(line, f[0]))), &ep); err != nil {
				t.Fatalf("ENTRYPOINT %q: want the exec (JSON) form: %v", line, err)
			}
			stages[len(stages)-1].entrypoint = ep
		case "COPY":
			if len(f) == 4 && strings.HasPrefix(f[1], "--from=") {
				stages[len(stages)-1].copies[f[3]] = f[2]
			}
		case "RUN":
			env := ""
			for _, cmd := range strings.Split(line, "&&") {
				if m := regexp.MustCompile(`CGO_ENABLED=(\d)`).FindStringSubmatch(cmd); m != nil {
					env = m[1]
				}
				if strings.Contains(cmd, "go build") {
					for _, m := range cmdTarget.FindAllStringSubmatch(cmd, -1) {
						cgo[m[1]] = env
					}
				}
			}
		}
	}
	return stages, cgo
}

// The Dockerfile and the release describe the same images: one target per image, named for
// its binary, with the binary at the same path, the same user and entrypoint, and built with
// cgo exactly when the release builds it so.
func TestDockerfileDescribesTheReleaseImages(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages, cgo := parseDockerfile(t, string(data))
	targets := map[string]stage{}
	for _, s := range stages {
		if len(s.entrypoint) > 0 {
			targets[s.name] = s
		}
	}
	for _, img := range Images {
		s, ok := targets[img.Binary]
		if !ok {
			t.Errorf("the Dockerfile has no target %s with an ENTRYPOINT", img.Binary)
			continue
		}
		delete(targets, img.Binary)
		cfg := img.Config()
		if s.user != cfg.User {
			t.Errorf("target %s: USER %s, the release's image runs as %s", img.Binary, s.user, cfg.User)
		}
		if !slices.Equal(s.entrypoint, cfg.Entrypoint) {
			t.Errorf("target %s: ENTRYPOINT %q, the release's is %q", img.Binary, s.entrypoint, cfg.Entrypoint)
		}
		if src, ok := s.copies[img.Path()]; !ok || filepath.Base(src) != img.Binary {
			t.Errorf("target %s: copies %v, want its binary copied to %s", img.Binary, s.copies, img.Path())
		}
		if want := map[bool]string{true: "1", false: "0"}[img.CGO]; cgo[img.Binary] != want {
			t.Errorf("the Dockerfile builds ./cmd/%s with CGO_ENABLED=%q, the release with %s", img.Binary, cgo[img.Binary], want)
		}
	}
	for name := range targets {
		t.Errorf("the Dockerfile's target %s is not an image of the release (internal/release.Images)", name)
	}
}
