package image

import (
	"fmt"
	"os"
	"strings"
)

// The users of the images: root, and the unprivileged user distroless' :nonroot images run
// as (the chart's controller and scheduler pods ask for it by number).
const (
	RootUser    = "0:0"
	NonrootUser = "65532:65532"
)

// CABundle is where the base's CA certificates are, as in Debian and distroless images.
const CABundle = "etc/ssl/certs/ca-certificates.crt"

// caBundles are where Linux distributions keep the CA bundle, as crypto/x509 looks for it.
var caBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine
}

// Base is the files of a minimal base for any binary, built offline: the user database with
// root and nonroot (65532), and this machine's CA certificates at CABundle, so that a
// program can verify TLS servers and runs as a named user. It holds no shell and no package
// manager. caFile is the CA bundle to copy; empty looks in the usual places.
func Base(caFile string) ([]File, string, error) {
	candidates := caBundles
	if caFile != "" {
		candidates = []string{caFile}
	}
	var ca []byte
	var from string
	for _, p := range candidates {
		data, err := os.ReadFile(p)
		if err == nil {
			ca, from = data, p
			break
		}
		if caFile != "" {
			return nil, "", fmt.Errorf("CA certificates: %w", err)
		}
	}
	if ca == nil {
		return nil, "", fmt.Errorf("CA certificates: none of %s exists; install your distribution's ca-certificates package or name a PEM bundle", strings.Join(caBundles, ", "))
	}
	return []File{
		{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: CABundle, Mode: 0o644, Data: ca},
	}, from, nil
}
