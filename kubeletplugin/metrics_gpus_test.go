package kubeletplugin_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// gpuOf is the index of the GPU the claim's first device is on (gpu-<index>-...).
func gpuOf(t *testing.T, c *resourceapi.ResourceClaim) string {
	t.Helper()
	name := c.Status.Allocation.Devices.Results[0].Device
	m := regexp.MustCompile(`^gpu-(\d+)(-|$)`).FindStringSubmatch(name)
	if m == nil {
		t.Fatalf("device %s names no GPU", name)
	}
	return m[1]
}

// gpuInfo is the gpudra_plugin_gpu_info line of one GPU.
func gpuInfo(d *plugin.Driver, index int, migMode string) string {
	g := d.Inventory().GPU(index)
	return fmt.Sprintf(`gpudra_plugin_gpu_info{gpu="%d",mig_mode="%s",model="%s",uuid="%s",vendor="%s"} 1`, index, migMode, g.ProductName, g.UUID, g.VendorOf())
}

func TestMetricsPerGPUShowPreparedClaims(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	url := serveMetrics(t, d)
	// Scrapes meanwhile read the prepared claims as the prepares change them.
	stop, scraped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := http.Get(url); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	whole := n.allocate(wholeGPU) // GPU 2
	mustPrepare(t, d, whole)
	share := n.allocate(shareClaim("1Gi", "10", ""))
	mustPrepare(t, d, share)
	mig := n.allocate(migClaim)
	mustPrepare(t, d, mig)
	close(stop)
	<-scraped
	sg, mg := gpuOf(t, share), gpuOf(t, mig)
	if sg == "2" || mg == "2" || sg == mg {
		t.Fatalf("the share is on GPU %s and the MIG device on GPU %s; want two GPUs other than 2", sg, mg)
	}
	var idle string
	for _, g := range d.Inventory().GPUs {
		if s := fmt.Sprint(g.Index); s != "2" && s != sg && s != mg {
			idle = s
			break
		}
	}

	got := scrape(t, url)
	want := []string{
		gpuInfo(d, 2, "disabled"),
		`gpudra_plugin_gpu_memory_bytes{gpu="2"} ` + strconv.FormatFloat(float64(d.Inventory().GPU(2).MemoryBytes), 'g', -1, 64),
		`gpudra_plugin_gpu_claims{gpu="2",type="gpu"} 1`,
		`gpudra_plugin_gpu_claims{gpu="2",type="share"} 0`,
		`gpudra_plugin_gpu_claims{gpu="2",type="mig"} 0`,
		`gpudra_plugin_gpu_claims{gpu="2",type="nvlink-group"} 0`,
		`gpudra_plugin_gpu_share_memory_bytes{gpu="2"} 0`,
		`gpudra_plugin_gpu_claims{gpu="` + sg + `",type="share"} 1`,
		`gpudra_plugin_gpu_claims{gpu="` + sg + `",type="gpu"} 0`,
		`gpudra_plugin_gpu_share_memory_bytes{gpu="` + sg + `"} 1.073741824e+09`,
		`gpudra_plugin_gpu_share_compute_percent{gpu="` + sg + `"} 10`,
		`gpudra_plugin_gpu_claims{gpu="` + mg + `",type="mig"} 1`,
		`gpudra_plugin_gpu_share_compute_percent{gpu="` + mg + `"} 0`,
		`gpudra_plugin_gpu_claims{gpu="` + idle + `",type="gpu"} 0`,
		`gpudra_plugin_gpu_claims{gpu="` + idle + `",type="share"} 0`,
		`gpudra_plugin_prepared_claims 3`,
	}
	mgIndex, _ := strconv.Atoi(mg)
	want = append(want, gpuInfo(d, mgIndex, "enabled"))
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("metrics lack %q", w)
		}
	}
	if n := strings.Count(got, "\ngpudra_plugin_gpu_info{"); n != len(d.Inventory().GPUs) {
		t.Errorf("%d gpudra_plugin_gpu_info series, want one per GPU (%d)", n, len(d.Inventory().GPUs))
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grepGpudra(got))
	}

	if err := unprepare(t, d, share); err != nil {
		t.Fatal(err)
	}
	got = scrape(t, url)
	for _, w := range []string{
		`gpudra_plugin_gpu_claims{gpu="` + sg + `",type="share"} 0`,
		`gpudra_plugin_gpu_share_memory_bytes{gpu="` + sg + `"} 0`,
		`gpudra_plugin_gpu_share_compute_percent{gpu="` + sg + `"} 0`,
		`gpudra_plugin_gpu_claims{gpu="2",type="gpu"} 1`,
	} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("after the share's unprepare, metrics lack %q:\n%s", w, grepGpudra(got))
		}
	}
}

func TestMetricNamesListThePluginsMetrics(t *testing.T) {
	names := plugin.MetricNames()
	for _, want := range []string{"gpudra_plugin_prepare_seconds", "gpudra_plugin_published_devices", "gpudra_plugin_gpu_claims", "gpudra_plugin_gpu_info", "gpudra_build_info"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("MetricNames() = %v, lacks %s", names, want)
		}
	}
}

// An AMD node's GPUs say their vendor in gpudra_plugin_gpu_info.
func TestMetricsGPUInfoNamesTheVendor(t *testing.T) {
	n := newKFDNode(t, "mi300x-8")
	d := n.newDriver(nil)
	got := scrape(t, serveMetrics(t, d))
	amd := regexp.MustCompile(`(?m)^gpudra_plugin_gpu_info\{gpu="\d+",.*model="AMD Instinct MI300X",.*vendor="amd"\} 1$`).FindAllString(got, -1)
	if len(amd) != 8 {
		t.Errorf("%d gpudra_plugin_gpu_info series of AMD MI300X GPUs, want 8:\n%s", len(amd), grepGpudra(got))
	}
}
