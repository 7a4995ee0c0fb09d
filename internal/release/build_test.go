package release

import (
	"archive/tar"
	"context"
	"debug/buildinfo"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	gpudrabuildinfo "github.com/gpudra/gpudra/internal/buildinfo"
)

// fakeRepo is a module with a program at cmd/<binary> for each of binaries, which prints
// the version the linker set in k8s.io/component-base/version (a stand-in of that package,
// so that it builds offline): with a C function when cgo, else pure Go.
func fakeRepo(t *testing.T, binaries map[string]bool) string {
	t.Helper()
	repo := t.TempDir()
	write := func(p, data string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/fake\n\ngo 1.26\n\nrequire k8s.io/component-base v0.0.0\n\nreplace k8s.io/component-base => ./component-base\n")
	write("component-base/go.mod", "module k8s.io/component-base\n\ngo 1.26\n")
	write("component-base/version/version.go", "package version\n\nvar gitVersion = \"unset\"\n\nfunc Get() string { return gitVersion }\n")
	for b, cgo := range binaries {
		src := "package main\n\nimport (\n\t\"fmt\"\n\n\t\"k8s.io/component-base/version\"\n)\n\nfunc main() { fmt.Print(version.Get()) }\n"
		if cgo {
			src = strings.Replace(src, "import (", "// int answer(void) { return 42; }\nimport \"C\"\n\nimport (", 1)
			src = strings.Replace(src, "fmt.Print(version.Get())", "fmt.Print(version.Get()); _ = C.answer()", 1)
		}
		write("cmd/"+b+"/main.go", src)
	}
	return repo
}

// imageFiles reads the image named ref from an image archive: its config's user and
// entrypoint, and its files' contents by path.
func imageFiles(t *testing.T, archive, ref string) (user string, entrypoint []string, files map[string][]byte) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("%s not in %s: %v", ref, archive, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files = map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				files[h.Name], _ = io.ReadAll(tr)
			}
		}
		rc.Close()
	}
	return cf.Config.User, cf.Config.Entrypoint, files
}

// A release image holds its binary, built with the release's version stamped, at
// /usr/bin/<binary> as entrypoint, the user database and CA certificates, and for a cgo
// binary the C libraries it loads; it runs as the table's user and is named for the tag.
func TestBuilderWritesTheImageOfEachBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("no ldd")
	}
	plugin := Image{Binary: "gpudra-kubelet-plugin", CGO: true, User: "0:0"}
	controller := Image{Binary: "gpudra-controller", User: "65532:65532"}
	repo := fakeRepo(t, map[string]bool{plugin.Binary: true, controller.Binary: false})
	src := gpudrabuildinfo.Source{Version: "v1.2.3-rc.1", Commit: "0123abc", Date: "2026-01-02T03:04:05Z"}
	b := Builder{Repo: repo, Source: src, Registry: "registry.example/gpu", Work: t.TempDir()}
	for _, img := range []Image{plugin, controller} {
		out := filepath.Join(t.TempDir(), img.Binary+".tar")
		c, err := b.Image(context.Background(), img, out)
		if err != nil {
			t.Fatal(err)
		}
		ref := "registry.example/gpu/" + img.Binary + ":1.2.3-rc.1"
		if c.Ref != ref {
			t.Errorf("%s: ref %s, want %s", img.Binary, c.Ref, ref)
		}
		user, entrypoint, files := imageFiles(t, out, ref)
		if user != img.User || !slices.Equal(entrypoint, []string{"/usr/bin/" + img.Binary}) {
			t.Errorf("%s: user %q entrypoint %q, want %q and /usr/bin/%s", img.Binary, user, entrypoint, img.User, img.Binary)
		}
		bin, ok := files["usr/bin/"+img.Binary]
		if !ok {
			t.Fatalf("%s: no usr/bin/%s in the image", img.Binary, img.Binary)
		}
		stamped := filepath.Join(t.TempDir(), "bin")
		if err := os.WriteFile(stamped, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if version, err := exec.Command(stamped).Output(); err != nil || string(version) != "v1.2.3-rc.1" {
			t.Errorf("%s: the binary reports version %q (%v), want v1.2.3-rc.1", img.Binary, version, err)
		}
		bi, err := buildinfo.ReadFile(stamped)
		if err != nil {
			t.Fatal(err)
		}
		var cgo string
		for _, s := range bi.Settings {
			if s.Key == "CGO_ENABLED" {
				cgo = s.Value
			}
		}
		if want := map[bool]string{true: "1", false: "0"}[img.CGO]; cgo != want {
			t.Errorf("%s: built with CGO_ENABLED=%s, want %s", img.Binary, cgo, want)
		}
		if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") || !strings.Contains(string(files["etc/ssl/certs/ca-certificates.crt"]), "BEGIN CERTIFICATE") {
			t.Errorf("%s: the image lacks the nonroot user or the CA certificates", img.Binary)
		}
		var libc bool
		for p := range files {
			libc = libc || strings.Contains(p, "libc.so")
		}
		if libc != img.CGO || len(c.Libraries) > 0 != img.CGO {
			t.Errorf("%s: carries libc %v (libraries %v), want %v", img.Binary, libc, c.Libraries, img.CGO)
		}
	}
	// A release trims the build's paths; the lab's image keeps them (KeepPaths), so that it
	// reuses the packages the lab's own build compiled.
	for _, keep := range []bool{false, true} {
		b.KeepPaths = keep
		exe, err := b.Binary(context.Background(), controller)
		if err != nil {
			t.Fatal(err)
		}
		bi, err := buildinfo.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		trimmed := slices.ContainsFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == "-trimpath" && s.Value == "true" })
		if trimmed == keep {
			t.Errorf("KeepPaths %v: built with -trimpath %v", keep, trimmed)
		}
	}
}
