package lab

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

func TestPKIIssuesVerifiableLoopbackAndClientCertificates(t *testing.T) {
	p, err := NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.CA.Cert)
	server, err := tls.LoadX509KeyPair(p.APIServerCert, p.APIServerKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(server.Certificate[0])
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("API server certificate for %s: %v", host, err)
		}
	}
	kp, err := p.CA.Issue(CertSpec{CommonName: "system:node:a1-h100", Organization: []string{"system:nodes"}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := x509.ParseCertificate(client.Certificate[0])
	if _, err := cl.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if cl.Subject.CommonName != "system:node:a1-h100" || len(cl.Subject.Organization) != 1 || cl.Subject.Organization[0] != "system:nodes" {
		t.Errorf("subject %v, want user system:node:a1-h100 in group system:nodes", cl.Subject)
	}
}
