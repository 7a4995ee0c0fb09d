package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/gpudra/gpudra/internal/features"
	"github.com/gpudra/gpudra/queueing/dependencies"
	"github.com/gpudra/gpudra/queueing/largefirst"
	configwebhook "github.com/gpudra/gpudra/webhook"
)

// The webhook's serving certificate comes one of three ways:
//   - --webhook-cert-secret: github.com/open-policy-agent/cert-controller keeps a CA and a
//     serving certificate in that Secret, renews them before they expire and puts the CA
//     into the webhook configuration; every replica does (the Secret's resourceVersion
//     settles races), and the webhook serves once the kubelet has put the Secret's files
//     into --webhook-cert-dir;
//   - --webhook-self-signed: a CA and certificate made at start, for one replica (labs,
//     controllers outside a cluster, which no kubelet mounts a Secret for);
//   - neither: the files are in --webhook-cert-dir already (a Secret of cert-manager's).

// webhookCAName is the common name of the CA kept in --webhook-cert-secret.
const webhookCAName = "gpudra-webhook-ca"

// serveWebhook adds the config webhook to mgr: served on every replica (leader or not),
// once its certificate is in place, and counted in /readyz until then.
func (o options) serveWebhook(mgr ctrl.Manager) error {
	ready := make(chan struct{})
	if o.webhookCertSecret != "" {
		key, err := namespacedName("--webhook-cert-secret", o.webhookCertSecret)
		if err != nil {
			return err
		}
		err = rotator.AddRotator(mgr, &rotator.CertRotator{
			SecretKey:      key,
			CertDir:        o.webhookCertDir,
			CAName:         webhookCAName,
			CAOrganization: "gpudra",
			DNSName:        o.webhookCertDNSNames[0],
			ExtraDNSNames:  o.webhookCertDNSNames[1:],
			IsReady:        ready,
			Webhooks:       o.webhookConfigurations(),
			FieldOwner:     "gpudra-controller",
			// Every replica serves the webhook, so every replica needs the certificate.
			RequireLeaderElection: false,
		})
		if err != nil {
			return fmt.Errorf("--webhook-cert-secret=%s: %w", o.webhookCertSecret, err)
		}
	} else {
		close(ready)
	}
	srv := webhook.NewServer(webhook.Options{Host: o.webhookHost, Port: o.webhookPort, CertDir: o.webhookCertDir})
	srv.Register(configwebhook.Path, &webhook.Admission{Handler: configwebhook.Handler{}})
	if o.hamiPods {
		srv.Register(configwebhook.HAMiPath, &webhook.Admission{Handler: configwebhook.HAMiPods{Client: mgr.GetClient()}})
	}
	if bands := o.largeJobsFirst(); bands != nil {
		srv.Register(largefirst.WebhookPath, &webhook.Admission{Handler: largefirst.Webhook{Templates: mgr.GetAPIReader(), Bands: bands}})
	}
	if o.enabled(features.JobDependencies) {
		srv.Register(dependencies.WebhookPath, &webhook.Admission{Handler: dependencies.Webhook{Jobs: mgr.GetAPIReader()}})
	}
	if err := mgr.Add(webhookAfterCerts{ready: ready, server: srv}); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		select {
		case <-ready:
			return srv.StartedChecker()(req)
		default:
			return errors.New("the webhook's serving certificate is not in place yet")
		}
	})
}

// webhookConfigurations are the webhook configurations that get the webhook's CA: the
// config validation, and the mutating ones this controller serves (mutatingWebhooks).
func (o options) webhookConfigurations() []rotator.WebhookInfo {
	out := []rotator.WebhookInfo{{Name: configwebhook.ConfigurationName, Type: rotator.Validating}}
	for _, name := range o.mutatingWebhooks() {
		out = append(out, rotator.WebhookInfo{Name: name, Type: rotator.Mutating})
	}
	return out
}

// mutatingWebhooks names the MutatingWebhookConfigurations of the webhooks this controller
// serves: the HAMi pods' (--hami-pods), the job dependencies' (gate JobDependencies) and
// the large jobs first policy's (--large-jobs-first-bands, gate LargeJobsFirst).
func (o options) mutatingWebhooks() []string {
	var out []string
	if o.hamiPods {
		out = append(out, configwebhook.HAMiConfigurationName)
	}
	if o.enabled(features.JobDependencies) {
		out = append(out, dependencies.WebhookConfigurationName)
	}
	if o.largeJobsFirst() != nil {
		out = append(out, largefirst.WebhookConfigurationName)
	}
	return out
}

// webhookAfterCerts runs the webhook server once its certificate is ready, on every
// replica.
type webhookAfterCerts struct {
	ready  <-chan struct{}
	server webhook.Server
}

var _ manager.LeaderElectionRunnable = webhookAfterCerts{}

func (w webhookAfterCerts) Start(ctx context.Context) error {
	select {
	case <-w.ready:
	case <-ctx.Done():
		return nil
	}
	return w.server.Start(ctx)
}

func (webhookAfterCerts) NeedLeaderElection() bool { return false }

// selfSignedWebhookCert makes the webhook's certificate and publishes its CA in the
// webhook configuration (--webhook-self-signed), and in each MutatingWebhookConfiguration
// named by mutating.
func selfSignedWebhookCert(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, dir, names string, mutating []string) error {
	var dns []string
	var ips []net.IP
	for _, n := range strings.Split(names, ",") {
		if ip := net.ParseIP(strings.TrimSpace(n)); ip != nil {
			ips = append(ips, ip)
		} else if n = strings.TrimSpace(n); n != "" {
			dns = append(dns, n)
		}
	}
	ca, err := configwebhook.WriteSelfSignedCert(dir, dns, ips)
	if err != nil {
		return fmt.Errorf("--webhook-self-signed=%s: %w", names, err)
	}
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := configwebhook.InjectCABundle(ctx, c, configwebhook.ConfigurationName, ca); err != nil {
		return err
	}
	for _, name := range mutating {
		if err := configwebhook.InjectMutatingCABundle(ctx, c, name, ca); err != nil {
			return err
		}
	}
	return nil
}
