package reproduction

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/topology"

	"github.com/gpudra/gpudra/topology/placement"
)

// Bounds on a trace, so that a wrong file is an error rather than a replay that never
// ends or runs out of memory.
const (
	// MaxNodes is the largest cluster Kubernetes supports.
	MaxNodes = 5000
	// MaxTraceBytes bounds a node or pod list file (the Alibaba lists are under 1 MiB).
	MaxTraceBytes = 64 << 20
	// maxQuantity bounds cpu_milli and memory_mib (2^40: a million cores, an EiB), so
	// that sums over a trace stay far from overflowing.
	maxQuantity = 1 << 40
)

// Trace file names inside a trace directory.
const (
	NodeListFile  = "openb_node_list_gpu_node.csv"
	podListPrefix = "openb_pod_list_"
)

// PodListFile is the pod list of a named trace ("default", "cpu050", …).
func PodListFile(trace string) string { return podListPrefix + trace + ".csv" }

// Traces lists the pod traces in a directory, by name.
func Traces(dir string) ([]string, error) { return TracesIn(os.DirFS(dir)) }

// TracesIn lists the pod traces at the root of fsys, by name.
func TracesIn(fsys fs.FS) ([]string, error) {
	files, err := fs.Glob(fsys, podListPrefix+"*.csv")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(f, podListPrefix), ".csv"))
	}
	return out, nil
}

// LoadNodes reads a node list (sn,cpu_milli,memory_mib,gpu,model) of 1..MaxNodes nodes
// with 0..topology.MaxGPUs GPUs each.
func LoadNodes(path string) ([]placement.NodeSpec, error) { return loadFile(path, readNodes) }

// LoadNodesFrom reads the node list name of fsys (see LoadNodes).
func LoadNodesFrom(fsys fs.FS, name string) ([]placement.NodeSpec, error) {
	return loadFrom(fsys, name, readNodes)
}

// readNodes reads a node list from r; source names it in errors.
func readNodes(r io.Reader, source string) ([]placement.NodeSpec, error) {
	var out []placement.NodeSpec
	err := readCSV(r, source, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, func(r row) error {
		if len(out) == MaxNodes {
			return fmt.Errorf("more than %d nodes; accepted are 1..%d, the largest cluster Kubernetes supports", MaxNodes, MaxNodes)
		}
		n := placement.NodeSpec{Name: r.str(0), CPU: r.int(1, maxQuantity), Memory: r.int(2, maxQuantity), GPUs: int(r.int(3, topology.MaxGPUs)), Model: r.str(4)}
		if r.err != nil {
			return r.err
		}
		if n.Name == "" {
			return errors.New("sn: empty node name")
		}
		if n.GPUs > 0 || n.Model != "" {
			if !placement.KnownModel(n.Model) {
				_, err := placement.ModelByCode(n.Model)
				return fmt.Errorf("model: %w", err)
			}
		}
		out = append(out, n)
		return nil
	})
	if err == nil && len(out) == 0 {
		return nil, fmt.Errorf("%s: no nodes after the header; a node list has 1..%d", source, MaxNodes)
	}
	return out, err
}

// LoadPods reads a pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,…])
// of 1..MaxArrivals pods. GPU demand must be something a ResourceClaim can say: a whole
// number (up to topology.MaxGPUs) of whole GPUs, or one share of one GPU in steps of 10
// milli (1 % of compute).
func LoadPods(path string) ([]placement.Pod, error) { return loadFile(path, readPods) }

// LoadPodsFrom reads the pod list name of fsys (see LoadPods).
func LoadPodsFrom(fsys fs.FS, name string) ([]placement.Pod, error) {
	return loadFrom(fsys, name, readPods)
}

// readPods reads a pod list from r; source names it in errors.
func readPods(r io.Reader, source string) ([]placement.Pod, error) {
	var out []placement.Pod
	err := readCSV(r, source, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}, func(r row) error {
		if len(out) == MaxArrivals {
			return fmt.Errorf("more than %d pods; accepted are 1..%d", MaxArrivals, MaxArrivals)
		}
		p := placement.Pod{Name: r.str(0), CPU: r.int(1, maxQuantity), Memory: r.int(2, maxQuantity), GPUs: int(r.int(3, topology.MaxGPUs)), GPUMilli: r.int(4, maxQuantity)}
		if r.err != nil {
			return r.err
		}
		if len(r.fields) > 5 && r.fields[5] != "" {
			for _, m := range strings.Split(r.fields[5], "|") {
				if !placement.KnownModel(m) {
					_, err := placement.ModelByCode(m)
					return fmt.Errorf("gpu_spec: %w", err)
				}
				p.Models = append(p.Models, m)
			}
		}
		switch {
		case p.Name == "":
			return errors.New("name: empty pod name")
		case p.GPUMilli > placement.MilliPerGPU:
			return fmt.Errorf("gpu_milli: %d is more than one GPU (0..%d)", p.GPUMilli, placement.MilliPerGPU)
		case p.GPUs == 0 && p.GPUMilli != 0:
			return fmt.Errorf("gpu_milli: %d with num_gpu 0", p.GPUMilli)
		case p.GPUs > 0 && p.GPUMilli == 0:
			return fmt.Errorf("gpu_milli: 0 with num_gpu %d", p.GPUs)
		case p.GPUs > 1 && p.GPUMilli != placement.MilliPerGPU:
			return fmt.Errorf("gpu_milli: %d with num_gpu %d; several GPUs must be whole (1000)", p.GPUMilli, p.GPUs)
		case p.GPUMilli%10 != 0:
			return fmt.Errorf("gpu_milli: %d is not a multiple of 10 (a share's compute is a whole percent)", p.GPUMilli)
		}
		out = append(out, p)
		return nil
	})
	if err == nil && len(out) == 0 {
		return nil, fmt.Errorf("%s: no pods after the header; a pod list has 1..%d", source, MaxArrivals)
	}
	return out, err
}

// row is one CSV record; its accessors record the first error.
type row struct {
	fields []string
	header []string
	err    error
}

func (r *row) str(k int) string { return r.fields[k] }

// int parses field k as an integer 0..hi.
func (r *row) int(k int, hi int64) int64 {
	v, err := strconv.ParseInt(r.fields[k], 10, 64)
	switch {
	case r.err != nil:
	case err != nil || v < 0:
		r.err = fmt.Errorf("%s: %q is not a non-negative integer", r.header[k], r.fields[k])
	case v > hi:
		r.err = fmt.Errorf("%s: %d is more than %d; accepted values are 0..%d", r.header[k], v, hi, hi)
	}
	return v
}

func loadFile[T any](path string, read func(io.Reader, string) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var none T
		return none, err
	}
	defer f.Close()
	return read(f, path)
}

func loadFrom[T any](fsys fs.FS, name string, read func(io.Reader, string) (T, error)) (T, error) {
	f, err := fsys.Open(name)
	if err != nil {
		var none T
		return none, err
	}
	defer f.Close()
	return read(f, name)
}

// readCSV reads CSV of at most MaxTraceBytes whose header starts with the given columns
// and calls fn per record; errors carry path:line.
func readCSV(r io.Reader, path string, columns []string, fn func(row) error) error {
	lr := &io.LimitedReader{R: r, N: MaxTraceBytes + 1}
	tooLarge := func() error {
		return fmt.Errorf("%s: larger than the %d-byte (%d MiB) limit on trace files", path, MaxTraceBytes, MaxTraceBytes>>20)
	}
	cr := csv.NewReader(lr)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = false
	header, err := cr.Read()
	if lr.N <= 0 {
		return tooLarge()
	}
	if err != nil {
		return fmt.Errorf("%s:1: reading header: %w", path, err)
	}
	for k, c := range columns {
		if k >= len(header) || strings.TrimSpace(header[k]) != c {
			return fmt.Errorf("%s:1: header must start with %s, got %s", path, strings.Join(columns, ","), strings.Join(header, ","))
		}
	}
	for {
		rec, err := cr.Read()
		if lr.N <= 0 {
			return tooLarge()
		}
		if err == io.EOF {
			return nil
		}
		if err != nil { // a *csv.ParseError, which says the line
			return fmt.Errorf("%s: %w", path, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) < len(columns) || len(rec) > len(header) {
			return fmt.Errorf("%s:%d: %d fields, want %d to %d", path, line, len(rec), len(columns), len(header))
		}
		if err := fn(row{fields: rec, header: header}); err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
	}
}
