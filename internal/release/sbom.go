package release

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx/v2/common"
	spdx "github.com/spdx/tools-golang/spdx/v2/v2_3"
)

// noAssertion is SPDX's "not stated" for a field that needs a value.
const noAssertion = "NOASSERTION"

// SBOM is the SPDX 2.3 document of the image c describes, dated created: the image; the Go
// main module, the Go standard library and every module the binary's build information
// (debug/buildinfo) lists, each with its package URL (pkg:golang/...); for a cgo binary the
// Debian packages that own the C libraries copied in (when dpkg knows them); and every file
// of the image with its SHA-1 and SHA-256.
func SBOM(c Contents, version string, created time.Time) (*spdx.Document, error) {
	bi, err := buildinfo.ReadFile(c.Binary)
	if err != nil {
		return nil, fmt.Errorf("%s: build information: %w", c.Binary, err)
	}
	tag := strings.TrimPrefix(version, "v")
	sum := sha256.New()
	doc := &spdx.Document{
		SPDXVersion:    spdx.Version,
		DataLicense:    spdx.DataLicense,
		SPDXIdentifier: "DOCUMENT",
		DocumentName:   c.Ref,
		CreationInfo: &spdx.CreationInfo{
			Creators: []common.Creator{{CreatorType: "Organization", Creator: "gpudra"}, {CreatorType: "Tool", Creator: "gpudra-release-" + version}},
			Created:  created.UTC().Format(time.RFC3339),
		},
	}
	imageID := common.ElementID("Image-" + spdxID(c.Image.Binary))
	doc.Packages = append(doc.Packages, &spdx.Package{
		PackageName: c.Ref, PackageSPDXIdentifier: imageID, PackageVersion: tag,
		PackageDownloadLocation: noAssertion, PrimaryPackagePurpose: "CONTAINER",
		PackageSupplier: &common.Supplier{SupplierType: "Organization", Supplier: "gpudra"},
	})
	relate := func(a common.ElementID, rel string, b common.ElementID) {
		doc.Relationships = append(doc.Relationships, &spdx.Relationship{RefA: common.MakeDocElementID("", string(a)), RefB: common.MakeDocElementID("", string(b)), Relationship: rel})
	}
	relate("DOCUMENT", common.TypeRelationshipDescribe, imageID)

	mainID := common.ElementID("Go-" + spdxID(bi.Main.Path))
	doc.Packages = append(doc.Packages, goPackage(mainID, bi.Main.Path, version, "APPLICATION"))
	relate(imageID, common.TypeRelationshipContains, mainID)
	stdID := common.ElementID("Go-stdlib")
	doc.Packages = append(doc.Packages, goPackage(stdID, "stdlib", bi.GoVersion, "LIBRARY"))
	relate(mainID, common.TypeRelationshipDependsOn, stdID)
	for _, m := range bi.Deps {
		path, v := m.Path, m.Version
		if m.Replace != nil {
			path, v = m.Replace.Path, m.Replace.Version
		}
		id := common.ElementID("Go-" + spdxID(path))
		p := goPackage(id, path, v, "LIBRARY")
		if m.Replace != nil {
			p.PackageComment = "replaces " + m.Path + "@" + m.Version
		}
		doc.Packages = append(doc.Packages, p)
		relate(mainID, common.TypeRelationshipDependsOn, id)
	}

	owners := debianOwners(c.Libraries)
	seen := map[string]bool{}
	for i, f := range c.Files {
		s1, s256 := sha1.Sum(f.Data), sha256.Sum256(f.Data)
		sum.Write(s256[:])
		id := common.ElementID(fmt.Sprintf("File-%d-%s", i, spdxID(filepath.Base(f.Path))))
		kind := "BINARY"
		if bytes.HasPrefix(f.Data, []byte("-----BEGIN")) || strings.HasPrefix(f.Path, "etc/") {
			kind = "TEXT"
		}
		doc.Files = append(doc.Files, &spdx.File{
			FileName: "/" + f.Path, FileSPDXIdentifier: id, FileTypes: []string{kind},
			Checksums: []common.Checksum{
				{Algorithm: common.SHA1, Value: hex.EncodeToString(s1[:])},
				{Algorithm: common.SHA256, Value: hex.EncodeToString(s256[:])},
			},
			FileCopyrightText: noAssertion, LicenseConcluded: noAssertion,
		})
		relate(imageID, common.TypeRelationshipContains, id)
		switch o, ok := owners["/"+f.Path]; {
		case "/"+f.Path == c.Image.Path():
			relate(id, common.TypeRelationshipGeneratedFrom, mainID)
		case ok:
			pid := common.ElementID("Deb-" + spdxID(o.name))
			if !seen[o.name] {
				seen[o.name] = true
				doc.Packages = append(doc.Packages, &spdx.Package{
					PackageName: o.name, PackageSPDXIdentifier: pid, PackageVersion: o.version,
					PackageDownloadLocation: noAssertion, PrimaryPackagePurpose: "LIBRARY",
					PackageExternalReferences: []*spdx.PackageExternalReference{{Category: common.CategoryPackageManager, RefType: "purl",
						Locator: fmt.Sprintf("pkg:deb/%s/%s@%s?arch=%s", o.vendor, o.name, strings.ReplaceAll(o.version, "+", "%2B"), o.arch)}},
				})
				relate(imageID, common.TypeRelationshipContains, pid)
			}
			relate(pid, common.TypeRelationshipContains, id)
		}
	}
	doc.DocumentNamespace = "https://github.com/gpudra/gpudra/spdx/" + c.Image.Binary + "-" + tag + "-" + hex.EncodeToString(sum.Sum(nil))[:16]
	return doc, nil
}

// WriteSBOM writes doc as indented JSON.
func WriteSBOM(w io.Writer, doc *spdx.Document) error {
	return spdxjson.Write(doc, w, spdxjson.Indent("  "))
}

func goPackage(id common.ElementID, path, version, purpose string) *spdx.Package {
	return &spdx.Package{
		PackageName: path, PackageSPDXIdentifier: id, PackageVersion: version,
		PackageDownloadLocation: noAssertion, PrimaryPackagePurpose: purpose,
		PackageExternalReferences: []*spdx.PackageExternalReference{{Category: common.CategoryPackageManager, RefType: "purl", Locator: goPURL(path, version)}},
	}
}

// goPURL is a Go module's package URL: pkg:golang/<path>@<version>, the path's segments
// percent-encoded where they must be.
func goPURL(path, version string) string {
	return "pkg:golang/" + strings.ReplaceAll(path, "@", "%40") + "@" + strings.ReplaceAll(version, "+", "%2B")
}

var notIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID is s with what an SPDX identifier cannot hold replaced by -.
func spdxID(s string) string { return notIDChars.ReplaceAllString(s, "-") }

// debianPackage is the Debian package that owns a file.
type debianPackage struct{ name, version, arch, vendor string }

// debianOwners are the Debian packages dpkg says own files, by file; empty without dpkg or
// for files no package owns.
func debianOwners(files []string) map[string]debianPackage {
	out := map[string]debianPackage{}
	ctx := context.Background()
	vendor := "debian"
	if data, err := exec.CommandContext(ctx, "sh", "-c", `. /etc/os-release && echo "$ID"`).Output(); err == nil && len(bytes.TrimSpace(data)) > 0 {
		vendor = string(bytes.TrimSpace(data))
	}
	for _, f := range files {
		var owner string
		// dpkg records a file under its merged-/usr path or its /lib one.
		for _, p := range []string{f, strings.TrimPrefix(f, "/usr"), "/usr" + f} {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				for _, q := range []string{p, real} {
					if out, err := exec.CommandContext(ctx, "dpkg-query", "-S", q).Output(); err == nil {
						owner, _, _ = strings.Cut(strings.TrimSpace(string(out)), ": ")
						break
					}
				}
			}
			if owner != "" {
				break
			}
		}
		if owner == "" {
			continue
		}
		name, arch, _ := strings.Cut(owner, ":")
		info, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f", "${Version} ${Architecture}", owner).Output()
		if err != nil {
			continue
		}
		v, a, _ := strings.Cut(strings.TrimSpace(string(info)), " ")
		if arch == "" {
			arch = a
		}
		out[f] = debianPackage{name: name, version: v, arch: arch, vendor: vendor}
	}
	return out
}
