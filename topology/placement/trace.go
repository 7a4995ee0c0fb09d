package placement

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Trace file names inside a trace directory.
const (
	NodeListFile  = "openb_node_list_gpu_node.csv"
	podListPrefix = "openb_pod_list_"
)

// PodListFile is the pod list of a named trace ("default", "cpu050", …).
func PodListFile(trace string) string { return podListPrefix + trace + ".csv" }

// Traces lists the pod traces in a directory, by name.
func Traces(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, podListPrefix+"*.csv"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), podListPrefix), ".csv"))
	}
	return out, nil
}

// LoadNodes reads a node list (sn,cpu_milli,memory_mib,gpu,model).
func LoadNodes(path string) ([]NodeSpec, error) {
	var out []NodeSpec
	err := readCSV(path, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, func(r row) error {
		n := NodeSpec{Name: r.str(0), CPU: r.int(1, 0), Memory: r.int(2, 0), GPUs: int(r.int(3, 0)), Model: r.str(4)}
		if r.err != nil {
			return r.err
		}
		if n.Name == "" {
			return errors.New("sn: empty node name")
		}
		if n.GPUs > 0 || n.Model != "" {
			if !knownModel(n.Model) {
				_, err := ModelByCode(n.Model)
				return fmt.Errorf("model: %w", err)
			}
		}
		out = append(out, n)
		return nil
	})
	return out, err
}

// LoadPods reads a pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,…]).
// GPU demand must be something a ResourceClaim can say: a whole number of whole GPUs,
// or one share of one GPU in steps of 10 milli (1 % of compute).
func LoadPods(path string) ([]Pod, error) {
	var out []Pod
	err := readCSV(path, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}, func(r row) error {
		p := Pod{Name: r.str(0), CPU: r.int(1, 0), Memory: r.int(2, 0), GPUs: int(r.int(3, 0)), GPUMilli: r.int(4, 0)}
		if r.err != nil {
			return r.err
		}
		if len(r.fields) > 5 && r.fields[5] != "" {
			for _, m := range strings.Split(r.fields[5], "|") {
				if !knownModel(m) {
					_, err := ModelByCode(m)
					return fmt.Errorf("gpu_spec: %w", err)
				}
				p.Models = append(p.Models, m)
			}
		}
		switch {
		case p.Name == "":
			return errors.New("name: empty pod name")
		case p.GPUMilli > MilliPerGPU:
			return fmt.Errorf("gpu_milli: %d is more than one GPU (0..%d)", p.GPUMilli, MilliPerGPU)
		case p.GPUs == 0 && p.GPUMilli != 0:
			return fmt.Errorf("gpu_milli: %d with num_gpu 0", p.GPUMilli)
		case p.GPUs > 0 && p.GPUMilli == 0:
			return fmt.Errorf("gpu_milli: 0 with num_gpu %d", p.GPUs)
		case p.GPUs > 1 && p.GPUMilli != MilliPerGPU:
			return fmt.Errorf("gpu_milli: %d with num_gpu %d; several GPUs must be whole (1000)", p.GPUMilli, p.GPUs)
		case p.GPUMilli%10 != 0:
			return fmt.Errorf("gpu_milli: %d is not a multiple of 10 (a share's compute is a whole percent)", p.GPUMilli)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// row is one CSV record; its accessors record the first error.
type row struct {
	fields []string
	header []string
	err    error
}

func (r *row) str(k int) string { return r.fields[k] }

func (r *row) int(k int, min int64) int64 {
	v, err := strconv.ParseInt(r.fields[k], 10, 64)
	if err == nil && v < min {
		err = fmt.Errorf("below %d", min)
	}
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %q is not a non-negative integer", r.header[k], r.fields[k])
	}
	return v
}

// readCSV reads a CSV file whose header starts with the given columns and calls fn per
// record; errors carry file:line.
func readCSV(path string, columns []string, fn func(row) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = false
	header, err := cr.Read()
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
		if err == io.EOF {
			return nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(rec) < len(columns) || len(rec) > len(header) {
			return fmt.Errorf("%s:%d: %d fields, want %d to %d", path, line, len(rec), len(columns), len(header))
		}
		if err := fn(row{fields: rec, header: header}); err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
	}
}
