package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/lab"
)

// newLabCommand is `gpudra lab`: a real Kubernetes 1.37 cluster of simulated GPU nodes on this
// machine, for trying gpudra and for its end-to-end tests.
func newLabCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run a local Kubernetes 1.37 cluster of simulated GPU nodes with gpudra and Kueue",
		Long: `A lab is a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) on 127.0.0.1 with kwok nodes, Kueue, and one gpudra-kubelet-plugin per node
publishing the ResourceSlices of a simulated GPU server (dgx-h100, dgx-v100, l40s-pcie).
The first run builds the components from the Go module proxy (20-30 minutes on 2 cores) and
caches them in $GPUDRA_CACHE (default ~/.cache/gpudra). One lab runs per machine.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", "", "the lab's state folder (default $GPUDRA_LAB_DIR, else <repo>/.lab)")
	cmd.AddCommand(newLabUpCommand(&dir), newLabDownCommand(&dir), newLabStatusCommand(&dir), newLabDemoCommand(&dir))
	return cmd
}

// interruptible cancels its context on SIGINT/SIGTERM so that a half-started lab is stopped.
func interruptible(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

func newLabUpCommand(dir *string) *cobra.Command {
	var opts lab.Options
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the lab and wait until every component, node and plugin is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := interruptible(cmd.Context())
			defer cancel()
			opts.Dir, opts.Progress = *dir, cmd.ErrOrStderr()
			s, err := lab.Up(ctx, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nThe lab is up. Use it with:\n  export KUBECONFIG=%s\n  kubectl get nodes\nStatus: gpudra lab status   Tear down: gpudra lab down\n",
				lab.Layout{Root: s.Dir}.Kubeconfig())
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.LabFile, "lab-file", "", "the cluster's shape (default: the embedded deployments/lab/lab.yaml)")
	cmd.Flags().StringVar(&opts.PluginBinary, "plugin", "", "a built gpudra-kubelet-plugin to run instead of building one from the repository")
	return cmd
}

func newLabDownCommand(dir *string) *cobra.Command {
	var keepLogs bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop every process the lab started and remove its state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.Down(lab.DownOptions{Dir: *dir, KeepLogs: keepLogs, Progress: cmd.ErrOrStderr()})
		},
	}
	cmd.Flags().BoolVar(&keepLogs, "keep-logs", false, "keep <dir>/logs")
	return cmd
}

func newLabStatusCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the lab's components, nodes, published devices and allocated claims",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := lab.Status(cmd.Context(), *dir)
			if err != nil {
				return err
			}
			r.Write(cmd.OutOrStdout())
			return nil
		},
	}
}

func newLabDemoCommand(dir *string) *cobra.Command {
	var opts lab.DemoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Bring the lab up and walk through the example claims in deployments/examples",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := interruptible(cmd.Context())
			defer cancel()
			opts.Up.Dir, opts.Up.Progress = *dir, cmd.OutOrStdout()
			return lab.Demo(ctx, opts)
		},
	}
	cmd.Flags().StringVar(&opts.Up.LabFile, "lab-file", "", "the cluster's shape when the lab is not running yet")
	cmd.Flags().StringVar(&opts.Examples, "examples", "", "folder of example manifests (default <repo>/deployments/examples)")
	return cmd
}
