package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/convert"
)

func newConvertCommand() *cobra.Command {
	var file string
	var claims, strict bool
	cmd := &cobra.Command{
		Use:   "convert -f FILE|-",
		Short: "Convert manifests written for NVIDIA's DRA driver or device plugin to gpudra's",
		Long: `Convert reads Kubernetes manifests (multi-document YAML or a List) and writes them with
NVIDIA's DRA driver names replaced by gpudra's: DeviceClasses gpu.nvidia.com and
mig.nvidia.com, CEL selectors and matchAttribute constraints on gpu.nvidia.com attributes,
opaque GpuConfig and MigDeviceConfig, and consumable memory requests (a gpudra share).

Container limits nvidia.com/gpu and nvidia.com/mig-<profile> of NVIDIA's device plugin are
kept: gpudra's DeviceClasses serve them as extended resources. --claims rewrites them into
a ResourceClaimTemplate and the pod's resourceClaims instead.

The converted manifests go to standard output and the report to standard error: what was
converted, what was kept, and what was not converted (object, field and why). A claim
whose NVIDIA GPU parts do not all have a gpudra equivalent is left as it was. With
--strict the command fails when anything is not converted.

Input is bounded: at most 16 MiB, 2,000,000 YAML nodes (aliases written out) and
mappings nested 256 deep; a larger input is an error.`,
		Example: `  gpudra convert -f gpu-test4.yaml > gpu-test4.gpudra.yaml
  kubectl get resourceclaimtemplates,deployments -A -o yaml | gpudra convert -f - --claims`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var in []byte
			var err error
			switch file {
			case "":
				return fmt.Errorf("-f: required: a manifest file, or - for standard input")
			case "-":
				in, err = convert.ReadInput(cmd.InOrStdin())
			default:
				var f *os.File
				if f, err = os.Open(file); err == nil {
					in, err = convert.ReadInput(f)
					f.Close()
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			res, err := convert.Convert(in, convert.Options{Claims: claims})
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if _, err := cmd.OutOrStdout().Write(res.Output); err != nil {
				return err
			}
			if err := res.WriteReport(cmd.ErrOrStderr()); err != nil {
				return err
			}
			if n := res.Count(convert.NotConverted); strict && n > 0 {
				return fmt.Errorf("--strict: %d not converted (listed above)", n)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "manifests to convert, - for standard input")
	cmd.Flags().BoolVar(&claims, "claims", false, "rewrite nvidia.com/gpu and nvidia.com/mig-<profile> limits into ResourceClaimTemplates instead of keeping them")
	cmd.Flags().BoolVar(&strict, "strict", false, "fail (exit status 1) when anything is not converted")
	return cmd
}
