package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpudra/gpudra/driver/allocation"
)

func newExplainCommand() *cobra.Command {
	var kubeconfig, namespace string
	var show int
	cmd := &cobra.Command{
		Use:   "explain (claim/NAME | pod/NAME)",
		Short: "Explain why a ResourceClaim is pending, or where it was allocated",
		Long: `Explain asks Kubernetes' real DRA allocator, over the cluster's live ResourceSlices and
allocated claims, whether the claim fits on each node now; for the nodes that came closest it
says which request or constraint fails and which claims hold the devices it wanted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || (kind != "claim" && kind != "pod") {
				return fmt.Errorf("%q: want claim/NAME or pod/NAME", args[0])
			}
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = kubeconfig
			cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
			cfg, err := cc.ClientConfig()
			if err != nil {
				return err
			}
			if namespace == "" {
				if namespace, _, err = cc.Namespace(); err != nil {
					return err
				}
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			return explain(cmd.Context(), cmd.OutOrStdout(), client, namespace, kind, name, show)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace of the claim or pod")
	cmd.Flags().IntVar(&show, "nodes", 5, "how many of the closest nodes to show")
	return cmd
}

func explain(ctx context.Context, w io.Writer, c kubernetes.Interface, ns, kind, name string, show int) error {
	var targets []string
	if kind == "pod" {
		pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range pod.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				targets = append(targets, *s.ResourceClaimName)
			}
		}
		for _, rc := range pod.Spec.ResourceClaims {
			if rc.ResourceClaimName != nil {
				targets = append(targets, *rc.ResourceClaimName)
			}
		}
		if len(targets) == 0 {
			return fmt.Errorf("pod %s/%s has no ResourceClaims yet (claims from templates appear once the resourceclaim controller creates them)", ns, name)
		}
	} else {
		targets = []string{name}
	}
	slices, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	classes, err := c.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	claims, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	st, holders := allocation.FromCluster(classes.Items, slices.Items, claims.Items)
	byName := map[string]*resourceapi.ResourceClaim{}
	for k := range claims.Items {
		byName[claims.Items[k].Namespace+"/"+claims.Items[k].Name] = &claims.Items[k]
	}
	for _, t := range targets {
		cl, ok := byName[ns+"/"+t]
		if !ok {
			return fmt.Errorf("ResourceClaim %s/%s not found", ns, t)
		}
		if a := cl.Status.Allocation; a != nil {
			fmt.Fprintf(w, "claim %s/%s is allocated", ns, t)
			if a.NodeSelector != nil {
				fmt.Fprintf(w, " (node selector %s)", a.NodeSelector.String())
			}
			fmt.Fprintln(w, ":")
			for _, d := range a.Devices.Results {
				fmt.Fprintf(w, "  request %s: %s/%s/%s\n", d.Request, d.Driver, d.Pool, d.Device)
			}
			continue
		}
		diag, err := st.Explain(ctx, cl, holders)
		if err != nil {
			return err
		}
		fits := 0
		for _, d := range diag {
			if d.Fits {
				fits++
			}
		}
		fmt.Fprintf(w, "claim %s/%s is not allocated; it fits on %d of %d nodes with devices now.\n", ns, t, fits, len(diag))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tFITS\tWHY")
		for k, d := range diag {
			if k == show {
				fmt.Fprintf(tw, "(%d more)\t\t\n", len(diag)-show)
				break
			}
			fmt.Fprintf(tw, "%s\t%v\t%s\n", d.Node, d.Fits, d.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
