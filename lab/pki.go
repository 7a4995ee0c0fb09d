package lab

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity is long enough for any lab and short enough to be obviously a lab's.
const certValidity = 30 * 24 * time.Hour

// CertSpec says who a certificate is for.
type CertSpec struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool // serving certificate (else client)
}

// CA is the lab's certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// KeyPair is a PEM-encoded certificate and private key.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// NewCA creates a self-signed lab CA.
func NewCA(name string) (*CA, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: name, Organization: []string{"gpudra lab"}}, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertPEM is the CA certificate in PEM.
func (ca *CA) CertPEM() []byte {
	pem, _ := certutil.EncodeCertificates(ca.Cert)
	return pem
}

// Issue signs a new key pair for spec.
func (ca *CA) Issue(spec CertSpec) (KeyPair, error) {
	key, err := newKey()
	if err != nil {
		return KeyPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return KeyPair{}, err
	}
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if spec.Server {
		// Servers may call themselves (etcd's gateway dials its own client port with its
		// serving certificate), so serving certificates are client certificates too.
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("sign certificate for %s: %w", spec.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return KeyPair{}, err
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		return KeyPair{}, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Write stores the pair as <dir>/<name>.crt and <dir>/<name>.key (0600).
func (kp KeyPair) Write(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, kp.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// loopback is what every lab server certificate is valid for.
func loopbackServer(cn string, extraDNS ...string) CertSpec {
	return CertSpec{CommonName: cn, Server: true,
		DNSNames: append([]string{"localhost"}, extraDNS...),
		IPs:      []net.IP{net.ParseIP("127.0.0.1")}}
}

// PKI holds the files of the lab's public key infrastructure, all under <lab>/pki.
type PKI struct {
	Dir                  string
	CA                   *CA
	CACert, CAKey        string
	ServiceAccountKey    string // private key signing service account tokens
	APIServerCert        string
	APIServerKey         string
	EtcdServerCert       string
	EtcdServerKey        string
	EtcdClientCert       string // the API server's client certificate for etcd
	EtcdClientKey        string
	ControllerMgrServing KeyPairFiles
	SchedulerServing     KeyPairFiles
	// APIServerKubeletClient is the API server's client certificate for kubelets (logs, exec).
	APIServerKubeletClient KeyPairFiles
}

// KeyPairFiles are the paths of a written key pair.
type KeyPairFiles struct{ Cert, Key string }

// NewPKI creates the CA and the control plane's certificates in dir.
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := NewCA("gpudra-lab-ca")
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, CA: ca}
	caKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(ca.Key)
	if err != nil {
		return nil, err
	}
	if p.CACert, p.CAKey, err = (KeyPair{CertPEM: ca.CertPEM(), KeyPEM: caKeyPEM}).Write(dir, "ca"); err != nil {
		return nil, err
	}
	sa, err := newKey()
	if err != nil {
		return nil, err
	}
	saPEM, err := keyutil.MarshalPrivateKeyToPEM(sa)
	if err != nil {
		return nil, err
	}
	// The API server derives the verifying public key from this same file.
	p.ServiceAccountKey = filepath.Join(dir, "sa.key")
	if err := os.WriteFile(p.ServiceAccountKey, saPEM, 0o600); err != nil {
		return nil, err
	}
	issue := func(name string, spec CertSpec) (string, string, error) {
		kp, err := ca.Issue(spec)
		if err != nil {
			return "", "", err
		}
		return kp.Write(dir, name)
	}
	steps := []struct {
		name      string
		spec      CertSpec
		cert, key *string
	}{
		{"apiserver", loopbackServer("kube-apiserver", "kubernetes", "kubernetes.default", "kubernetes.default.svc"), &p.APIServerCert, &p.APIServerKey},
		{"etcd-server", loopbackServer("etcd"), &p.EtcdServerCert, &p.EtcdServerKey},
		{"etcd-client", CertSpec{CommonName: "kube-apiserver-etcd-client"}, &p.EtcdClientCert, &p.EtcdClientKey},
		{"controller-manager-serving", loopbackServer("kube-controller-manager"), &p.ControllerMgrServing.Cert, &p.ControllerMgrServing.Key},
		{"scheduler-serving", loopbackServer("kube-scheduler"), &p.SchedulerServing.Cert, &p.SchedulerServing.Key},
		{"apiserver-kubelet-client", CertSpec{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
			&p.APIServerKubeletClient.Cert, &p.APIServerKubeletClient.Key},
	}
	for _, s := range steps {
		if *s.cert, *s.key, err = issue(s.name, s.spec); err != nil {
			return nil, fmt.Errorf("%s certificate: %w", s.name, err)
		}
	}
	return p, nil
}
