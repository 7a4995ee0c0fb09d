package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/lab"
)

// streamSample is the cluster at one moment of a round.
type streamSample struct {
	at      time.Duration
	held    float64 // GPUs held by bound pods (a share its part in the gpudra round)
	served  float64 // the same jobs' demand as the gpudra round counts it
	waiting int     // jobs submitted and not yet all bound
}

// streamResult is one round's measurement.
type streamResult struct {
	gangRound
	submitted, gangs  int
	submitErrors      int
	admitted          int       // Workloads admitted during the window
	bound             int       // pods bound during the window
	latency           []float64 // per job submitted: seconds to all pods bound; +Inf if never
	samples           []streamSample
	createTook        []float64 // seconds each Job create took (the API server and its webhooks)
	gangsBound        int       // gangs whose pods were all bound
	gangsInRack       int       // of those, the gangs in one rack
	cpu               map[string]float64
	peak              map[string]int
	hwmNote           string
	window, drainUsed time.Duration
}

// streamRun is the -stream mode's settings.
type streamRun struct {
	params        streamParams
	nodes         int
	trace         string
	drain         time.Duration
	baselineFirst bool
	keep          bool
	only          string        // "A" or "B": run that round alone
	shareNodes    int           // > 0: in round A, only the first shareNodes nodes publish shares; the rest publish --publish=training
	profileAt     time.Duration // with -cpuprofile, when in the window the profiles start (0: halfway)
}

func runStream(ctx context.Context, s streamRun) error {
	if o := s.only; o != "" && !strings.EqualFold(o, streamRounds[0].name) && !strings.EqualFold(o, streamRounds[1].name) {
		return fmt.Errorf("-stream-only %q: want %s or %s", o, streamRounds[0].name, streamRounds[1].name)
	}
	pods, err := readStreamTrace(s.trace)
	if err != nil {
		return err
	}
	jobs, err := buildStream(pods, s.params)
	if err != nil {
		return err
	}
	gangs := 0
	for _, j := range jobs {
		if j.gang {
			gangs++
		}
	}
	fmt.Fprintf(os.Stderr, "stream: %d jobs (%d gangs) from trace %s over %s, offered load %.0f %% of %d GPUs\n",
		len(jobs), gangs, s.trace, s.params.window, 100*streamOffered(jobs, s.nodes, s.params.window), s.nodes*gangNodeGPUs)

	l, closeLab, err := upRoundsLab(ctx, s.keep)
	if err != nil {
		return err
	}
	defer closeLab()
	cfg, cs, tmp, labSched, tc := l.cfg, l.cs, l.tmp, l.sched, l.tc

	start := time.Now()
	if err := addStreamNodes(ctx, cs, s.nodes); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "added %d nodes of 8 GPUs (%d racks of %d) in %s\n", s.nodes, s.nodes/gangRackNodes, gangRackNodes, time.Since(start).Round(time.Second))
	q := strings.ReplaceAll(queues(s.nodes*gangNodeGPUs), "stopPolicy: Hold", "stopPolicy: None")
	if err := apply(ctx, cfg, q); err != nil {
		return err
	}
	order := streamRounds
	if s.baselineFirst {
		order = []gangRound{streamRounds[1], streamRounds[0]}
	}
	if s.only != "" {
		order = slices.DeleteFunc(order, func(r gangRound) bool { return !strings.EqualFold(r.name, s.only) })
	}
	var results []streamResult
	for _, r := range order {
		t := time.Now()
		if err := publishStreamSlices(ctx, cs, s.nodes, r.slices, s.shareNodes); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %s: the nodes publish %s slices (%s)\n", r.name, r.slices, time.Since(t).Round(time.Second))
		if err := apply(ctx, cfg, streamNamespace(r, jobs)); err != nil {
			return err
		}
		if err := waitServiceAccount(ctx, cs, r.set); err != nil {
			return err
		}
		var extra map[string]int
		stop := func() {}
		if r.scheduler == lab.KubeScheduler {
			pid, st, err := startBaselineScheduler(ctx, tmp, labSched.Argv, tc.Scheduler)
			if err != nil {
				return err
			}
			stop, extra = st, map[string]int{lab.KubeScheduler: pid}
		}
		res, err := measureStream(ctx, cfg, cs, r, jobs, s, extra)
		if err != nil {
			stop()
			return fmt.Errorf("round %s: %w", r.name, err)
		}
		results = append(results, res)
		printControllerMetrics(ctx, r)
		t = time.Now()
		err = cleanUp(ctx, cfg, cs, r.set, "jobs")
		stop()
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %s: its jobs deleted, their pods and claims gone, in %s\n", r.name, time.Since(t).Round(time.Second))
	}
	profiling.Wait()
	reportStream(os.Stdout, s, len(jobs), results)
	return nil
}

// profileStream takes CPU profiles of gpudra-controller (in the gpudra round) and Kueue,
// after. A profile's 15 seconds run on while the round goes on.
func profileStream(ctx context.Context, r gangRound, after time.Duration) {
	targets := map[string]int{}
	if c := controllerState; c != nil && r.mode == "gpudra" && c.Ports["metrics"] > 0 {
		targets["gpudra-controller"] = c.Ports["metrics"]
	}
	if c := labState.Component("kueue"); c != nil && c.Ports["pprof"] > 0 {
		targets["kueue"] = c.Ports["pprof"]
	}
	for name, port := range targets {
		profiling.Go(func() {
			select {
			case <-time.After(after):
			case <-ctx.Done():
				return
			}
			profileCPU(ctx, port, fmt.Sprintf("%s.stream-%s-%s", cpuProfile, r.name, name))
		})
	}
}

// addStreamNodes adds the stream's kwok nodes, racks of gangRackNodes in one block, without
// slices (each round publishes its own).
func addStreamNodes(ctx context.Context, cs kubernetes.Interface, nodes int) error {
	return forEachNode(nodes, func(rack, i int) error {
		name := gangNodeName(streamBlock, rack, i)
		rackName := fmt.Sprintf("%s-r%d", streamBlock, rack)
		return lab.AddKwokNode(ctx, cs, lab.Node{Name: name, Profile: "dgx-h100", Block: streamBlock, Rack: rackName, ToR: rackName,
			Resources: lab.NodeResources{CPU: "112", Memory: "2Ti", Pods: 110}})
	})
}

// publishStreamSlices replaces the stream nodes' ResourceSlices with gpudra's or plain ones.
// With shareNodes > 0, gpudra's are two node pools: the first shareNodes nodes publish
// everything (shares among them), the others what --publish=training does.
func publishStreamSlices(ctx context.Context, cs kubernetes.Interface, nodes int, kind string, shareNodes int) error {
	return forEachNode(nodes, func(rack, i int) error {
		name := gangNodeName(streamBlock, rack, i)
		pub := driver.PublishAll
		if kind == "gpudra" && shareNodes > 0 && rack*gangRackNodes+i >= shareNodes {
			pub = driver.PublishTraining
		}
		if err := cs.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.nodeName=" + name}); err != nil {
			return fmt.Errorf("node %s: delete its slices: %w", name, err)
		}
		return publishSlices(ctx, cs, name, kind, pub)
	})
}

// forEachNode runs f for every node (rack, index in rack), 16 at a time.
func forEachNode(nodes int, f func(rack, i int) error) error {
	errs := make(chan error, nodes)
	sem := make(chan struct{}, 16)
	for n := range nodes {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- f(n/gangRackNodes, n%gangRackNodes)
		}()
	}
	var err error
	for range nodes {
		err = errors.Join(err, <-errs)
	}
	return err
}

// jobState is what a round knows of one job.
type jobState struct {
	job       streamJob
	submitted time.Duration
	bound     map[string]string // pod → node
	allBound  time.Duration     // 0 until every pod is bound
	deleted   bool
}

// measureStream submits the stream's jobs on time for the window, deletes each when its run
// time has passed since its last pod was bound, and watches Workloads and pods until every
// submitted job is bound or the drain time after the window has passed.
func measureStream(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, r gangRound, jobs []streamJob, s streamRun, extra map[string]int) (streamResult, error) {
	res := streamResult{gangRound: r, cpu: map[string]float64{}, peak: map[string]int{}, window: s.params.window}
	pids := roundProcesses(extra)
	manifests := make([]*batchv1.Job, len(jobs))
	for i, j := range jobs {
		manifests[i] = &batchv1.Job{}
		if err := yaml.UnmarshalStrict([]byte(streamJobManifest(r, j)), manifests[i]); err != nil {
			return res, fmt.Errorf("job %s: %w", j.name, err)
		}
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	wls := dyn.Resource(workloadsGVR).Namespace(r.set)
	ww, err := retryWatch(ctx, func(ctx context.Context) (string, error) {
		l, err := wls.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		return l.GetResourceVersion(), nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return wls.Watch(ctx, o) })
	if err != nil {
		return res, err
	}
	defer ww.Stop()
	pw, err := retryWatch(ctx, func(ctx context.Context) (string, error) {
		l, err := cs.CoreV1().Pods(r.set).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return cs.CoreV1().Pods(r.set).Watch(ctx, o)
	})
	if err != nil {
		return res, err
	}
	defer pw.Stop()

	before, hwmNote := startRound(pids)
	res.hwmNote = hwmNote
	machine := sampleCPU()

	t0 := time.Now()
	since := func() time.Duration { return time.Since(t0) }
	if cpuProfile != "" {
		at := s.profileAt
		if at <= 0 {
			at = s.params.window / 2
		}
		profileStream(ctx, r, at)
	}
	// The submitter creates each job at its arrival time, up to 64 creates at once (an API
	// server slowed by its admission webhooks must not hold the arrivals back); submissions
	// tell the loop.
	type submission struct {
		name     string
		at, took time.Duration
		err      error
	}
	submitted := make(chan submission, len(jobs))
	subCtx, stopSubmitting := context.WithCancel(ctx)
	defer stopSubmitting()
	go func() {
		var creates sync.WaitGroup
		defer func() { creates.Wait(); close(submitted) }()
		sem := make(chan struct{}, 64)
		for i, j := range jobs {
			if d := j.at - since(); d > 0 {
				select {
				case <-time.After(d):
				case <-subCtx.Done():
					return
				}
			}
			select {
			case sem <- struct{}{}:
			case <-subCtx.Done():
				return
			}
			creates.Add(1)
			go func() {
				defer func() { <-sem; creates.Done() }()
				at := since()
				_, err := cs.BatchV1().Jobs(r.set).Create(subCtx, manifests[i], metav1.CreateOptions{})
				submitted <- submission{name: j.name, at: at, took: since() - at, err: err}
			}()
		}
	}()
	// Deleters delete finished jobs off the loop, so that a slow delete never holds it.
	deletes := make(chan string, len(jobs))
	var deleters sync.WaitGroup
	background := metav1.DeletePropagationBackground
	for range 4 {
		deleters.Add(1)
		go func() {
			defer deleters.Done()
			for name := range deletes {
				_ = cs.BatchV1().Jobs(r.set).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background})
			}
		}()
	}
	defer func() { close(deletes); deleters.Wait() }()

	byName := map[string]*jobState{}
	for _, j := range jobs {
		byName[j.name] = &jobState{job: j, bound: map[string]string{}}
	}
	perPod := func(j streamJob) (held, served float64) {
		served = j.demand() / float64(j.pods)
		if r.mode == "gpudra" {
			return served, served
		}
		return float64(j.gpus), served
	}
	var held, served float64
	admittedSeen := map[string]bool{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	nextSample := time.Duration(0)
	subsOpen := true
	var drainStart time.Duration
	for {
		now := since()
		if !subsOpen {
			waiting := 0
			for _, js := range byName {
				if js.submitted > 0 && js.allBound == 0 {
					waiting++
				}
			}
			if drainStart == 0 {
				drainStart = max(now, s.params.window)
			}
			if waiting == 0 || now-drainStart >= s.drain {
				res.drainUsed = now - drainStart
				break
			}
		}
		select {
		case sub, ok := <-submitted:
			if !ok {
				subsOpen, submitted = false, nil
				continue
			}
			res.submitted++
			res.createTook = append(res.createTook, sub.took.Seconds())
			if sub.err != nil {
				res.submitErrors++
				fmt.Fprintf(os.Stderr, "round %s: create %s: %v\n", r.name, sub.name, sub.err)
				continue
			}
			js := byName[sub.name]
			js.submitted = max(sub.at, time.Nanosecond)
			if js.job.gang {
				res.gangs++
			}
		case ev, ok := <-ww.ResultChan():
			if !ok {
				return res, errors.New("workload watch ended")
			}
			u, isU := ev.Object.(*unstructured.Unstructured)
			if !isU || ev.Type == watch.Deleted || admittedSeen[u.GetName()] || !conditionTrue(u, "Admitted") {
				continue
			}
			admittedSeen[u.GetName()] = true
			if now <= s.params.window {
				res.admitted++
			}
		case ev, ok := <-pw.ResultChan():
			if !ok {
				return res, errors.New("pod watch ended")
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || p.Spec.NodeName == "" {
				continue
			}
			js := byName[p.Labels[batchv1.JobNameLabel]]
			if ev.Type == watch.Deleted {
				// A pod of a job not yet all bound is gone (Kueue evicted the job when its
				// pods were not ready in time): it no longer holds its GPUs.
				if js != nil && !js.deleted && js.allBound == 0 && js.bound[p.Name] != "" {
					delete(js.bound, p.Name)
					h, sv := perPod(js.job)
					held, served = held-h, served-sv
				}
				continue
			}
			if js == nil || js.deleted || js.bound[p.Name] != "" || len(js.bound) >= js.job.pods {
				continue
			}
			js.bound[p.Name] = p.Spec.NodeName
			if now <= s.params.window {
				res.bound++
			}
			h, sv := perPod(js.job)
			held, served = held+h, served+sv
			if len(js.bound) == js.job.pods {
				js.allBound = max(now, time.Nanosecond)
			}
		case <-tick.C:
			for _, js := range byName {
				if js.allBound > 0 && !js.deleted && now >= js.allBound+js.job.run {
					js.deleted = true
					h, sv := perPod(js.job)
					held, served = held-h*float64(len(js.bound)), served-sv*float64(len(js.bound))
					deletes <- js.job.name
				}
			}
			if now >= nextSample && now <= s.params.window+s.drain {
				waiting := 0
				for _, js := range byName {
					if js.submitted > 0 && js.allBound == 0 {
						waiting++
					}
				}
				res.samples = append(res.samples, streamSample{at: now, held: held, served: served, waiting: waiting})
				nextSample += 10 * time.Second
			}
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	stopSubmitting()
	res.cpu, res.peak = endRound(pids, before)
	fmt.Fprintf(os.Stderr, "round %s: %s\n", r.name, cpuSince(machine))
	for _, js := range byName {
		if js.submitted == 0 {
			continue
		}
		if js.allBound == 0 {
			res.latency = append(res.latency, math.Inf(1))
			continue
		}
		res.latency = append(res.latency, (js.allBound - js.submitted).Seconds())
		if js.job.gang {
			res.gangsBound++
			racks := map[string]bool{}
			for _, node := range js.bound {
				racks[rackOfNode(streamBlock, node)] = true
			}
			if len(racks) == 1 {
				res.gangsInRack++
			}
		}
	}
	return res, nil
}

// retryWatch lists for a resource version and watches from it, resuming on errors.
func retryWatch(ctx context.Context, list func(context.Context) (string, error), w func(context.Context, metav1.ListOptions) (watch.Interface, error)) (*watchtools.RetryWatcher, error) {
	rv, err := list(ctx)
	if err != nil {
		return nil, err
	}
	return watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: w})
}

func streamRoundTitle(r gangRound) string {
	if r.mode == "gpudra" {
		return "Kueue + gpudra check, gpudra-scheduler, gpudra's slices, shares as shares"
	}
	return "Kueue alone, kube-scheduler, plain slices, a share takes a GPU"
}

func reportStream(w io.Writer, s streamRun, jobs int, results []streamResult) {
	gpus := s.nodes * gangNodeGPUs
	fmt.Fprintf(w, "\nA stream of %d jobs over %s (trace %s, %.1f jobs/s, median run %s, every %dth a gang of 2–16 pods × 8 GPUs) on %d nodes × 8 GPUs (%d GPUs, %d racks of %d); %s drain at most:\n\n",
		jobs, s.params.window, s.trace, s.params.rate, s.params.medianRun, s.params.gangEvery, s.nodes, gpus, s.nodes/gangRackNodes, gangRackNodes, s.drain)
	if s.shareNodes > 0 {
		fmt.Fprintf(w, "Round A's nodes are two pools: %d publish shares (everything), %d what --publish=training publishes.\n\n", min(s.shareNodes, s.nodes), max(s.nodes-s.shareNodes, 0))
	}
	row := func(name string, f func(streamResult) string) {
		fmt.Fprintf(w, "| %s |", name)
		for _, r := range results {
			fmt.Fprintf(w, " %s |", f(r))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| |")
	for _, r := range results {
		fmt.Fprintf(w, " %s: %s |", r.name, streamRoundTitle(r.gangRound))
	}
	fmt.Fprint(w, "\n|---|")
	for range results {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	win := s.params.window.Seconds()
	row("jobs submitted (gangs)", func(r streamResult) string {
		e := ""
		if r.submitErrors > 0 {
			e = fmt.Sprintf(", %d refused", r.submitErrors)
		}
		return fmt.Sprintf("%d (%d)%s", r.submitted, r.gangs, e)
	})
	row("Job create (API server and webhooks), p50 / p99", func(r streamResult) string {
		return fmt.Sprintf("%s / %s", seconds(percentile(r.createTook, 50)), seconds(percentile(r.createTook, 99)))
	})
	row("Workloads admitted in the window, per s", func(r streamResult) string { return fmt.Sprintf("%.2f", float64(r.admitted)/win) })
	row("pods bound in the window, per s", func(r streamResult) string { return fmt.Sprintf("%.2f", float64(r.bound)/win) })
	for _, q := range []float64{50, 90, 99} {
		row(fmt.Sprintf("submission → all pods bound, p%.0f", q), func(r streamResult) string { return seconds(percentile(r.latency, q)) })
	}
	row("jobs not bound by the end", func(r streamResult) string {
		n := 0
		for _, l := range r.latency {
			if math.IsInf(l, 1) {
				n++
			}
		}
		return fmt.Sprintf("%d (drain %s)", n, r.drainUsed.Round(time.Second))
	})
	row("gangs bound in one rack", func(r streamResult) string { return fmt.Sprintf("%d of %d bound", r.gangsInRack, r.gangsBound) })
	row("GPUs held, mean over the window", func(r streamResult) string {
		h, _ := r.meanHeld()
		return fmt.Sprintf("%.0f (%.0f %%)", h, 100*h/float64(gpus))
	})
	row("work running (a share its part), mean", func(r streamResult) string {
		_, sv := r.meanHeld()
		return fmt.Sprintf("%.0f GPUs' worth (%.0f %%)", sv, 100*sv/float64(gpus))
	})
	fmt.Fprintf(w, "\n| minute | ")
	for _, r := range results {
		fmt.Fprintf(w, "%s: GPUs held, jobs waiting | ", r.name)
	}
	fmt.Fprint(w, "\n|---|")
	for range results {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for m := time.Minute; m <= s.params.window+s.drain; m += time.Minute {
		line, seen := fmt.Sprintf("| %d |", int(m.Minutes())), false
		for _, r := range results {
			if smp, ok := r.sampleAt(m); ok {
				seen = true
				line += fmt.Sprintf(" %.0f, %d |", smp.held, smp.waiting)
			} else {
				line += " - |"
			}
		}
		if !seen {
			break
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprint(w, "\n| process: CPU s, peak memory (VmHWM) |")
	for _, r := range results {
		fmt.Fprintf(w, " %s |", r.name)
	}
	fmt.Fprint(w, "\n|---|")
	for range results {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, p := range gangProcesses {
		row(p, func(r streamResult) string {
			if _, ok := r.cpu[p]; !ok {
				return "-"
			}
			return fmt.Sprintf("%.1f s, %d MiB", r.cpu[p], r.peak[p]/1024)
		})
	}
	for _, r := range results {
		if r.hwmNote != "" {
			fmt.Fprintf(w, "\nround %s: %s\n", r.name, r.hwmNote)
		}
	}
	var a, b *streamResult
	for i := range results {
		if results[i].mode == "gpudra" {
			a = &results[i]
		} else {
			b = &results[i]
		}
	}
	if a == nil || b == nil {
		return
	}
	fmt.Fprintf(w, "\nround %s ran first. A/B: Workloads admitted per s %s, pods bound per s %s, p50 %s, p99 %s\n", results[0].name,
		ratio(float64(a.admitted), float64(b.admitted)), ratio(float64(a.bound), float64(b.bound)),
		ratio(percentile(a.latency, 50), percentile(b.latency, 50)), ratio(percentile(a.latency, 99), percentile(b.latency, 99)))
}

func seconds(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "not bound by the end"
	}
	if v < 1 {
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.1f s", v)
}

func ratio(a, b float64) string {
	if b == 0 || math.IsInf(a, 0) || math.IsInf(b, 0) || math.IsNaN(a) || math.IsNaN(b) {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// meanHeld is the mean of the samples taken during the window.
func (r streamResult) meanHeld() (held, served float64) {
	n := 0
	for _, s := range r.samples {
		if s.at <= r.window {
			held, served, n = held+s.held, served+s.served, n+1
		}
	}
	if n == 0 {
		return 0, 0
	}
	return held / float64(n), served / float64(n)
}

// sampleAt is the last sample taken at or before t.
func (r streamResult) sampleAt(t time.Duration) (streamSample, bool) {
	var out streamSample
	ok := false
	for _, s := range r.samples {
		if s.at > t {
			break
		}
		out, ok = s, true
	}
	if ok && t-out.at > 15*time.Second {
		return out, false
	}
	return out, ok
}
