package release

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	spdxjson "github.com/spdx/tools-golang/json"
	spdx "github.com/spdx/tools-golang/spdx/v2/v2_3"

	"github.com/gpudra/gpudra/internal/image"
)

// The SBOM of an image lists every Go module the binary was built from (its build
// information, read here from the release program's binary), the Go standard library at the
// version that built it, and every file of the image with the checksums of its real
// contents; it reads back as an SPDX 2.3 document that describes the image.
func TestSBOMListsWhatTheBinaryAndImageHold(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	// A test's own binary carries no module list: build a program that has one.
	exe := filepath.Join(t.TempDir(), "release")
	build := exec.Command("go", "build", "-o", exe, "./hack/release")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./hack/release: %v\n%s", err, out)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	libs, err := image.Libraries(exe)
	if err != nil {
		t.Fatal(err)
	}
	libFiles, err := image.HostFiles(libs)
	if err != nil {
		t.Fatal(err)
	}
	img := Image{Binary: "gpudra-kubelet-plugin", CGO: true, User: "0:0"}
	c := Contents{Image: img, Ref: img.Ref(DefaultRegistry, "1.2.3"), Binary: exe, Libraries: libs,
		Files: append([]image.File{{Path: "usr/bin/gpudra-kubelet-plugin", Mode: 0o755, Data: data}, {Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0::/:/sbin/nologin\n")}}, libFiles...)}
	doc, err := SBOM(c, "v1.2.3", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteSBOM(&out, doc); err != nil {
		t.Fatal(err)
	}
	var got spdx.Document
	if err := spdxjson.ReadInto(&out, &got); err != nil {
		t.Fatalf("the SBOM does not read back as SPDX 2.3: %v", err)
	}
	if got.SPDXVersion != "SPDX-2.3" || got.DocumentNamespace == "" || got.CreationInfo == nil || got.CreationInfo.Created != "2026-01-02T03:04:05Z" {
		t.Errorf("document header: version %q namespace %q creation %+v", got.SPDXVersion, got.DocumentNamespace, got.CreationInfo)
	}
	purls := map[string]bool{}
	names := map[string]*spdx.Package{}
	for _, p := range got.Packages {
		names[p.PackageName] = p
		for _, r := range p.PackageExternalReferences {
			if r.RefType == "purl" {
				purls[r.Locator] = true
			}
		}
	}
	described := false
	for _, r := range got.Relationships {
		if r.Relationship == "DESCRIBES" && string(r.RefA.ElementRefID) == "DOCUMENT" {
			described = names[c.Ref] != nil && r.RefB.ElementRefID == names[c.Ref].PackageSPDXIdentifier
		}
	}
	if !described {
		t.Errorf("the document does not describe the image package %s", c.Ref)
	}

	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if len(bi.Deps) == 0 {
		t.Fatal("this test's binary lists no modules")
	}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		if purl := "pkg:golang/" + m.Path + "@" + m.Version; !purls[purl] {
			t.Errorf("module %s@%s is in the binary but not in the SBOM (no %s)", m.Path, m.Version, purl)
		}
	}
	if p := names["stdlib"]; p == nil || p.PackageVersion != bi.GoVersion {
		t.Errorf("the SBOM's Go standard library is %+v, want version %s", p, bi.GoVersion)
	}
	if p := names[bi.Main.Path]; p == nil || p.PackageVersion != "v1.2.3" {
		t.Errorf("the SBOM's main module %s is %+v, want version v1.2.3", bi.Main.Path, p)
	}
	if n := len(got.Packages); n != len(bi.Deps)+3+countDebian(got.Packages) {
		t.Errorf("%d packages, want the image, the main module, stdlib, %d modules and the Debian packages", n, len(bi.Deps))
	}

	files := map[string]*spdx.File{}
	for _, f := range got.Files {
		files[f.FileName] = f
	}
	for _, f := range c.Files {
		sf := files["/"+f.Path]
		if sf == nil {
			t.Errorf("/%s is in the image but not in the SBOM", f.Path)
			continue
		}
		s1, s256 := sha1.Sum(f.Data), sha256.Sum256(f.Data)
		want := map[string]string{"SHA1": hex.EncodeToString(s1[:]), "SHA256": hex.EncodeToString(s256[:])}
		for _, cs := range sf.Checksums {
			if want[string(cs.Algorithm)] != cs.Value {
				t.Errorf("/%s: %s %s, want %s", f.Path, cs.Algorithm, cs.Value, want[string(cs.Algorithm)])
			}
			delete(want, string(cs.Algorithm))
		}
		if len(want) > 0 {
			t.Errorf("/%s lacks checksums %v", f.Path, want)
		}
	}
	if len(got.Files) != len(c.Files) {
		t.Errorf("the SBOM lists %d files, the image holds %d", len(got.Files), len(c.Files))
	}
	// Where dpkg knows who owns the C library, the SBOM names that package.
	if _, err := exec.LookPath("dpkg-query"); err == nil && len(libs) > 0 {
		if p := names["libc6"]; p == nil || p.PackageVersion == "" {
			t.Errorf("the image carries %v but the SBOM names no libc6 package", libs)
		}
	}
}

func countDebian(ps []*spdx.Package) int {
	n := 0
	for _, p := range ps {
		for _, r := range p.PackageExternalReferences {
			if strings.HasPrefix(r.Locator, "pkg:deb/") {
				n++
			}
		}
	}
	return n
}
