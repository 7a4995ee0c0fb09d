package lab

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// The lab runs gpudra-controller's pods as processes, so it also does for them what a node
// and a cluster would: a kubelet keeps each pod's Secret volume in step with its Secret,
// and kube-proxy sends a Service's connections to its pods. Each of these is a helper
// process of the lab (it must outlive `gpudra lab up`): the lab's own executable, started
// with helperEnv naming the helper, runs it instead of its program (see init).
const helperEnv = "GPUDRA_LAB_HELPER"

// The lab's helpers.
const (
	// helperSecretVolume keeps a folder in step with a Secret's data (secretVolumeMain).
	helperSecretVolume = "secret-volume"
	// helperService forwards a port to the first of its backends that accepts (serviceMain).
	helperService = "service"
)

func init() {
	if name := os.Getenv(helperEnv); name != "" {
		os.Exit(runHelper(name, os.Args[1:]))
	}
}

func runHelper(name string, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch name {
	case helperSecretVolume:
		err = secretVolumeMain(ctx, args)
	case helperService:
		err = serviceMain(ctx, args)
	default:
		err = fmt.Errorf("%s=%s: no such lab helper (%s, %s)", helperEnv, name, helperSecretVolume, helperService)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpudra lab %s: %v\n", name, err)
		return 1
	}
	return 0
}

// helperProcess is the command line and environment that run a helper.
func helperProcess(name string, args ...string) (argv, env []string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("the lab's helpers run its own executable: %w", err)
	}
	return append([]string{exe}, args...), []string{helperEnv + "=" + name}, nil
}

// secretVolumeMain is the secret-volume helper: --dir is kept holding the data of Secret
// --secret (namespace/name), read with --kubeconfig, until SIGTERM. Until the Secret exists
// the folder stays empty, and when it is deleted the last files stay, as a kubelet does.
func secretVolumeMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(helperSecretVolume, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig to watch the Secret with")
	secret := fs.String("secret", "", "namespace/name of the Secret")
	dir := fs.String("dir", "", "the folder to keep in step with the Secret's data")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ns, name, ok := strings.Cut(*secret, "/")
	if !ok || ns == "" || name == "" || *dir == "" || *kubeconfig == "" {
		return fmt.Errorf("want --kubeconfig, --dir and --secret=<namespace>/<name>")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	// The resync writes again what someone else changed in the folder, as a kubelet's
	// periodic volume sync does.
	f := informers.NewSharedInformerFactoryWithOptions(cs, time.Minute, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
	sync := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok || s.Name != name {
			return
		}
		changed, err := writeSecretVolume(*dir, s.Data)
		switch {
		case err != nil:
			klog.ErrorS(err, "Writing the Secret's files", "secret", *secret, "resourceVersion", s.ResourceVersion, "dir", *dir)
		case changed:
			klog.InfoS("Wrote the Secret's files", "secret", *secret, "resourceVersion", s.ResourceVersion, "dir", *dir, "keys", sortedKeys(s.Data))
		}
	}
	if _, err := f.Core().V1().Secrets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    sync,
		UpdateFunc: func(_, obj any) { sync(obj) },
	}); err != nil {
		return err
	}
	klog.InfoS("Keeping a folder in step with a Secret", "secret", *secret, "dir", *dir)
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// The layout a kubelet's atomic writer gives a Secret volume: the files of one version in a
// folder ..<time>, the symlink ..data to it, and each key a symlink ..data/<key>. A new
// version is a new folder and ..data replaced by one rename, so a reader sees the files of
// one version or of the next, never some of each.
const (
	volumeDataLink = "..data"
	volumeTmpLink  = "..data_tmp"
)

// writeSecretVolume makes dir hold exactly data, one file a key; changed is false when it
// already did (nothing is written then).
func writeSecretVolume(dir string, data map[string][]byte) (changed bool, err error) {
	for k := range data {
		if k == "" || strings.Contains(k, "/") || strings.HasPrefix(k, "..") {
			return false, fmt.Errorf("key %q cannot name a file of the volume", k)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	if volumeHolds(dir, data) {
		return false, nil
	}
	version, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05.")+"*")
	if err != nil {
		return false, err
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(version, k), v, 0o600); err != nil {
			_ = os.RemoveAll(version)
			return false, err
		}
	}
	if err := replaceSymlink(filepath.Base(version), filepath.Join(dir, volumeDataLink), filepath.Join(dir, volumeTmpLink)); err != nil {
		_ = os.RemoveAll(version)
		return false, err
	}
	// The keys: new ones get their link, gone ones lose it (links into ..data follow it).
	for k := range data {
		link := filepath.Join(dir, k)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(volumeDataLink, k) {
			continue
		}
		if err := replaceSymlink(filepath.Join(volumeDataLink, k), link, filepath.Join(dir, ".."+k+".tmp")); err != nil {
			return true, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true, err
	}
	var errs []error
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == volumeDataLink || filepath.Join(dir, n) == version:
		case strings.HasPrefix(n, ".."):
			// The version before, and whatever a write cut short left.
			errs = append(errs, os.RemoveAll(filepath.Join(dir, n)))
		default:
			if _, ok := data[n]; !ok {
				errs = append(errs, os.Remove(filepath.Join(dir, n)))
			}
		}
	}
	return true, errors.Join(errs...)
}

// volumeHolds reports whether dir's current version has exactly data.
func volumeHolds(dir string, data map[string][]byte) bool {
	cur := filepath.Join(dir, volumeDataLink)
	entries, err := os.ReadDir(cur)
	if err != nil || len(entries) != len(data) {
		return false
	}
	for k, v := range data {
		got, err := os.ReadFile(filepath.Join(cur, k))
		if err != nil || string(got) != string(v) {
			return false
		}
		if target, err := os.Readlink(filepath.Join(dir, k)); err != nil || target != filepath.Join(volumeDataLink, k) {
			return false
		}
	}
	return true
}

// replaceSymlink points link at target in one rename, through tmp.
func replaceSymlink(target, link, tmp string) error {
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// serviceMain is the service helper: connections to --listen go to the --backend addresses
// in turn (one after the other, from connection to connection), and a connection a backend
// refuses goes to the next. A backend that is not serving (not started yet, or gone) is
// passed over at once, as kube-proxy passes over a pod that is not ready.
func serviceMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(helperService, flag.ContinueOnError)
	listen := fs.String("listen", "", "address to listen on (host:port)")
	var backends []string
	fs.Func("backend", "a backend's host:port (repeated)", func(s string) error {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return err
		}
		backends = append(backends, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" || len(backends) == 0 {
		return fmt.Errorf("want --listen and at least one --backend")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	klog.InfoS("Forwarding connections", "listen", ln.Addr().String(), "backends", backends)
	return serve(ctx, ln, backends)
}

// serve forwards ln's connections to backends until ctx ends.
func serve(ctx context.Context, ln net.Listener, backends []string) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var next atomic.Uint64
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		first := int(next.Add(1) - 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			forward(ctx, c, backends, first)
		}()
	}
}

// forward connects c to the first backend from backends[first] on that accepts, and copies
// both ways until both sides are done.
func forward(ctx context.Context, c net.Conn, backends []string, first int) {
	defer c.Close()
	var up net.Conn
	for k := range backends {
		b := backends[(first+k)%len(backends)]
		d := net.Dialer{Timeout: 2 * time.Second}
		var err error
		if up, err = d.DialContext(ctx, "tcp", b); err == nil {
			break
		}
		klog.V(2).InfoS("Backend refused a connection; trying the next", "backend", b, "err", err)
	}
	if up == nil {
		klog.InfoS("No backend accepts a connection", "backends", backends)
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, c)
		closeWrite(up)
	}()
	_, _ = io.Copy(c, up)
	closeWrite(c)
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}
