package kubeletplugin_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/internal/buildinfo"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// scrape reads the metrics endpoint.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(body)
}

// serveMetrics serves the plugin's metrics on a free loopback port.
func serveMetrics(t *testing.T, d *plugin.Driver) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := d.ServeMetrics(ctx, "127.0.0.1:0", plugin.MetricsAccess{})
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + addr.String() + "/metrics"
}

// waitForMetric waits until the plugin's metrics contain the line.
func waitForMetric(t *testing.T, d *plugin.Driver, line string) {
	t.Helper()
	url := serveMetrics(t, d)
	var got string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = scrape(t, url); strings.Contains(got, line+"\n") {
			return
		}
	}
	t.Fatalf("metrics never showed %q:\n%s", line, grepGpudra(got))
}

func grepGpudra(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "gpudra_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestMetricsShowPreparesAndWhatIsPublished(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	url := serveMetrics(t, d)
	c := n.allocate(wholeGPU)
	mustPrepare(t, d, c)
	share := n.allocate(shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: Magic}"))
	if _, err := prepare(t, d, share); err == nil {
		t.Fatal("a bad config prepared")
	}
	got := scrape(t, url)
	for _, want := range []string{
		`gpudra_plugin_prepare_seconds_count{type="gpu"} 1`,
		`gpudra_plugin_prepare_errors_total{type="share"} 1`,
		`gpudra_plugin_prepared_claims 1`,
		`gpudra_plugin_published_devices{type="gpu"} 8`,
		`gpudra_plugin_published_devices{type="share"} 8`,
		`gpudra_plugin_published_devices{type="nvlink-group"} 7`,
		`gpudra_plugin_corrupt_checkpoints_recovered_total 0`,
		`gpudra_build_info{build_date="` + buildinfo.Get().BuildDate + `",git_commit="` + buildinfo.Get().GitCommit + `",go_version="` + buildinfo.Get().GoVersion + `",version="` + buildinfo.Get().GitVersion + `"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !strings.Contains(got, `gpudra_plugin_prepare_seconds_bucket{type="gpu",le="`) {
		t.Error("metrics lack the prepare latency histogram's buckets")
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	got = scrape(t, url)
	for _, want := range []string{`gpudra_plugin_unprepare_seconds_count 1`, `gpudra_plugin_prepared_claims 0`} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("after unprepare, metrics lack %q:\n%s", want, grepGpudra(got))
		}
	}
}

func TestMetricsCountUnhealthyGPUs(t *testing.T) {
	c := startOnCluster(t, newNode(t, "dgx-h100"))
	inject(t, c.n, 4, nvmlsim.XID(79))
	waitForMetric(t, c.d, `gpudra_plugin_unhealthy_gpus 1`)
	waitForMetric(t, c.d, `gpudra_plugin_health_events_total{effect="NoExecute",kind="xid"} 1`)
}

// TestMetricsWaitForTheirAddress: in the host's network a rolling update's new plugin starts
// while the old one holds the metrics port; it must start anyway and serve its metrics on
// that port once the old one lets go. Any other bind error still stops it.
func TestMetricsWaitForTheirAddress(t *testing.T) {
	old, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := old.Addr().String()
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	got, err := d.ServeMetrics(ctx, addr, plugin.MetricsAccess{})
	if err != nil || got != nil {
		t.Fatalf("ServeMetrics on an address in use = %v, %v; want nil, nil (waiting for it)", got, err)
	}
	old.Close()
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(data); strings.Contains(body, "gpudra_plugin_published_devices") {
			return
		}
	}
	t.Fatalf("the plugin never served its metrics on %s after the old listener closed:\n%s", addr, body)
}

func TestMetricsBadAddressIsAnError(t *testing.T) {
	d := newNode(t, "dgx-h100").newDriver(nil)
	if _, err := d.ServeMetrics(t.Context(), "127.0.0.1:99999", plugin.MetricsAccess{}); err == nil || !strings.Contains(err.Error(), `metrics bind address "127.0.0.1:99999"`) {
		t.Fatalf("ServeMetrics with port 99999: %v, want an error naming the address", err)
	}
}
