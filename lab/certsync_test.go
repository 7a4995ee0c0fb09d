package lab

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestWriteSecretVolumeSwitchesVersionsAtOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	changed, err := writeSecretVolume(dir, map[string][]byte{"tls.crt": []byte("crt 1"), "tls.key": []byte("key 1"), "ca.crt": []byte("ca 1")})
	if err != nil || !changed {
		t.Fatalf("first write: changed %v, %v", changed, err)
	}
	wantFiles(t, dir, map[string]string{"tls.crt": "crt 1", "tls.key": "key 1", "ca.crt": "ca 1"})
	first, err := os.Readlink(filepath.Join(dir, volumeDataLink))
	if err != nil {
		t.Fatalf("no %s link: %v", volumeDataLink, err)
	}

	if changed, err := writeSecretVolume(dir, map[string][]byte{"tls.crt": []byte("crt 1"), "tls.key": []byte("key 1"), "ca.crt": []byte("ca 1")}); err != nil || changed {
		t.Fatalf("the same data again: changed %v, %v; want nothing written", changed, err)
	}
	if got, _ := os.Readlink(filepath.Join(dir, volumeDataLink)); got != first {
		t.Fatalf("the same data again moved %s from %s to %s", volumeDataLink, first, got)
	}

	// A renewal: new values, a key gone, a key added.
	if changed, err := writeSecretVolume(dir, map[string][]byte{"tls.crt": []byte("crt 2"), "tls.key": []byte("key 2"), "ca.key": []byte("ca key")}); err != nil || !changed {
		t.Fatalf("second write: changed %v, %v", changed, err)
	}
	wantFiles(t, dir, map[string]string{"tls.crt": "crt 2", "tls.key": "key 2", "ca.key": "ca key"})
	// Every key is a link through ..data, so one rename switched them all.
	for _, k := range []string{"tls.crt", "tls.key", "ca.key"} {
		if target, err := os.Readlink(filepath.Join(dir, k)); err != nil || target != filepath.Join(volumeDataLink, k) {
			t.Errorf("%s links to %q (%v), want %s", k, target, err, filepath.Join(volumeDataLink, k))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("the first version %s is still there (%v)", first, err)
	}

	// A Secret emptied: no files, the folder stays.
	if changed, err := writeSecretVolume(dir, nil); err != nil || !changed {
		t.Fatalf("emptied: changed %v, %v", changed, err)
	}
	wantFiles(t, dir, map[string]string{})
}

// wantFiles: dir holds exactly these files (besides the ..data link and its version).
func wantFiles(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names, hidden []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			hidden = append(hidden, e.Name())
			continue
		}
		names = append(names, e.Name())
	}
	if len(names) != len(want) {
		t.Errorf("files %v, want the keys of %v", names, want)
	}
	if len(hidden) != 2 {
		t.Errorf("hidden entries %v, want %s and one version", hidden, volumeDataLink)
	}
	for k, v := range want {
		got, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil || string(got) != v {
			t.Errorf("%s = %q (%v), want %q", k, got, err, v)
		}
	}
}

func TestWriteSecretVolumeRefusesKeysThatAreNoFileNames(t *testing.T) {
	for _, k := range []string{"", "a/b", "..data"} {
		if _, err := writeSecretVolume(t.TempDir(), map[string][]byte{k: []byte("x")}); err == nil {
			t.Errorf("key %q written", k)
		}
	}
}

// TestServiceSkipsABackendThatDoesNotServe: connections go to each backend in turn, and to
// the next when one refuses, so one serving backend is enough.
func TestServiceSkipsABackendThatDoesNotServe(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	gone.Close() // a replica that was killed: nothing listens there
	liveAddr := echo(t, "live")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, []string{goneAddr, liveAddr}) }()
	for range 4 {
		if got := ask(t, ln.Addr().String()); got != "live" {
			t.Fatalf("answered by %q, want the serving backend", got)
		}
	}
	// Both serving: each gets connections.
	l2, err := net.Listen("tcp", goneAddr)
	if err != nil {
		t.Skipf("the closed port was taken meanwhile: %v", err)
	}
	serveEcho(t, l2, "back")
	seen := map[string]int{}
	for range 4 {
		seen[ask(t, ln.Addr().String())]++
	}
	if seen["live"] == 0 || seen["back"] == 0 {
		t.Errorf("answers %v, want both backends in turn", seen)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// echo serves name, then what the client sent, on a new port.
func echo(t *testing.T, name string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, ln, name)
	return ln.Addr().String()
}

func serveEcho(t *testing.T, ln net.Listener, name string) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte(name + " " + line))
			}()
		}
	}()
}

// ask sends a line through addr and returns the name of the backend that answered.
func ask(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer through %s: %v", addr, err)
	}
	name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	if rest != "hello" {
		t.Fatalf("answer %q does not carry what was sent", line)
	}
	return name
}

// TestHelpersRunInPlaceOfTheProgram: an executable of this package started with helperEnv
// runs the helper, not its main (here: the test binary, which runs no test).
func TestHelpersRunInPlaceOfTheProgram(t *testing.T) {
	for _, tc := range []struct{ helper, want string }{
		{"no-such-helper", "no such lab helper"},
		{helperSecretVolume, "want --kubeconfig, --dir and --secret=<namespace>/<name>"},
		{helperService, "want --listen and at least one --backend"},
	} {
		argv, env, err := helperProcess(tc.helper)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "PASS") {
			t.Errorf("helper %s: %v, output %q; want it to fail with %q and run no test", tc.helper, err, out, tc.want)
		}
	}
}

func TestWebhookCertVolumeIsTheSecretMountedAtTheCertDir(t *testing.T) {
	pod := func(secret string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "controller",
				Args:         []string{"--webhook-port=9443", "--webhook-cert-dir=/certs", "--webhook-cert-secret=gpudra/gpudra-webhook-cert"},
				VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/certs", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}},
		}}
		p.Name, p.Namespace = "gpudra-controller-x", "gpudra"
		return p
	}
	if got, err := webhookCertVolume(pod("gpudra-webhook-cert")); err != nil || got != "gpudra-webhook-cert" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := webhookCertVolume(pod("other")); err == nil || !strings.Contains(err.Error(), "Secret gpudra/other") {
		t.Errorf("a volume of another Secret: %v", err)
	}
	selfSigned := pod("gpudra-webhook-cert")
	selfSigned.Spec.Containers[0].Args = []string{"--webhook-cert-dir=/certs", "--webhook-self-signed=localhost"}
	if _, err := webhookCertVolume(selfSigned); err == nil || !strings.Contains(err.Error(), "certManagement rotate") {
		t.Errorf("a self-signed controller: %v", err)
	}
}
