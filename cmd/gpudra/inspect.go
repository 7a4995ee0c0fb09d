package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/nvmlsim"
)

// nodeFlags are the flags every command that discovers a node shares with the plugin.
type nodeFlags struct {
	nvml     string
	nodeName string
	mig      string
	// kfd and sysfs choose where AMD and Hygon GPUs are read from (kfd.go).
	kfd, sysfs string
}

func (f *nodeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.nvml, "nvml", "nvml", `NVML backend: "nvml" (the real library), "sim:<profile>" (built-in: `+strings.Join(nvmlsim.BuiltinNames(), ", ")+`) or "sim:<profile.yaml>"`)
	cmd.Flags().StringVar(&f.nodeName, "node-name", defaultNodeName(), "node (and pool) name the slices are published for")
	cmd.Flags().StringVar(&f.mig, "mig", string(driver.MIGStatic), "MIG strategy: static (follow each GPU's MIG mode), dynamic (publish whole GPUs and every MIG placement) or none")
}

func defaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}

func newInspectCommand() *cobra.Command {
	var f nodeFlags
	var output string
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Show a node's GPUs, topology and the ResourceSlices gpudra publishes for it",
		Example: `  gpudra inspect --nvml=sim:dgx-v100
  gpudra inspect --nvml=sim:dgx-h100 --node-name=node-1 -o yaml
  gpudra inspect --kfd=sim:mi300x-8
  gpudra inspect --sysfs=captured-sys   # a copy of an AMD node's /sys/class/kfd and /sys/class/drm`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, err := f.inventory(cmd.Flags().Changed("nvml"))
			if err != nil {
				return err
			}
			pool, err := driver.Render(inv, driver.RenderOptions{MIG: driver.MIGStrategy(f.mig)})
			if err != nil {
				return fmt.Errorf("--mig: %w", err)
			}
			out := cmd.OutOrStdout()
			switch output {
			case "text":
				fmt.Fprintf(out, "Node %s\n\n", f.nodeName)
				if err := driver.WriteTopology(out, inv); err != nil {
					return err
				}
				fmt.Fprintln(out)
				return driver.WriteInventory(out, inv, pool)
			case "yaml":
				for _, s := range pool.ResourceSlices(f.nodeName, 1) {
					data, err := yaml.Marshal(s)
					if err != nil {
						return err
					}
					fmt.Fprintf(out, "---\n%s", data)
				}
				return nil
			case "json":
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"inventory": inv, "resourceSlices": pool.ResourceSlices(f.nodeName, 1)})
			default:
				return fmt.Errorf("-o %q: accepted values are text, yaml, json", output)
			}
		},
	}
	f.register(cmd)
	f.registerKFD(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, yaml (the ResourceSlices), json (inventory and slices)")
	return cmd
}
