package webhook

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConfigurationName is the ValidatingWebhookConfiguration the chart installs.
const ConfigurationName = "gpudra-config-validation"

// WriteSelfSignedCert creates a CA and a serving certificate for the given DNS names and
// IPs, writes tls.crt and tls.key (0600) into dir for the webhook server, and returns the
// CA certificate (PEM) to put in the webhook configuration's caBundle.
func WriteSelfSignedCert(dir string, dnsNames []string, ips []net.IP) ([]byte, error) {
	if len(dnsNames) == 0 {
		return nil, fmt.Errorf("webhook certificate: at least one DNS name is required")
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(dnsNames[0], ips, dnsNames[1:])
	if err != nil {
		return nil, fmt.Errorf("webhook certificate: %w", err)
	}
	// certPEM is the serving certificate followed by the CA that signed it.
	var blocks []*pem.Block
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if len(blocks) < 2 {
		return nil, fmt.Errorf("webhook certificate: expected a certificate and its CA, got %d PEM blocks", len(blocks))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(blocks[len(blocks)-1]), nil
}

// InjectCABundle sets caBundle on every webhook of the named configuration: a get and an
// update of that one object (the verbs its RBAC names), retried on a conflict.
func InjectCABundle(ctx context.Context, c client.Client, name string, ca []byte) error {
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	return injectCA(ctx, c, "ValidatingWebhookConfiguration", name, ca, &cfg, false, func() []*[]byte {
		out := make([]*[]byte, len(cfg.Webhooks))
		for k := range cfg.Webhooks {
			out[k] = &cfg.Webhooks[k].ClientConfig.CABundle
		}
		return out
	})
}

// InjectMutatingCABundle sets caBundle on every webhook of the named
// MutatingWebhookConfiguration, as InjectCABundle does for the validating one. A
// configuration that does not exist (an optional mutating webhook not installed) is left
// alone.
func InjectMutatingCABundle(ctx context.Context, c client.Client, name string, ca []byte) error {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	return injectCA(ctx, c, "MutatingWebhookConfiguration", name, ca, &cfg, true, func() []*[]byte {
		out := make([]*[]byte, len(cfg.Webhooks))
		for k := range cfg.Webhooks {
			out[k] = &cfg.Webhooks[k].ClientConfig.CABundle
		}
		return out
	})
}

// injectCA reads the configuration cfg (of kind) named name, sets every bundle that bundles returns
// (read after each get) to ca, and updates it when one changed; retried on a conflict.
func injectCA(ctx context.Context, c client.Client, kind, name string, ca []byte, cfg client.Object, missingOK bool, bundles func() []*[]byte) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, types.NamespacedName{Name: name}, cfg); err != nil {
			if missingOK {
				return client.IgnoreNotFound(err)
			}
			return err
		}
		changed := false
		for _, b := range bundles() {
			if !bytes.Equal(*b, ca) {
				*b, changed = ca, true
			}
		}
		if !changed {
			return nil
		}
		return c.Update(ctx, cfg)
	})
	if err != nil {
		return fmt.Errorf("caBundle of %s %s: %w", kind, name, err)
	}
	return nil
}
