package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"skywalker/internal/demo"
)

func newDemoCommand(logs *logFlags) *cobra.Command {
	var opt demo.Options
	var ports []int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole 3-region SkyWalker mesh on this machine and drive a day of traffic through it",
		Long: `demo starts three regions (us-east, eu-west, ap-east), each with two simulated
engines and a proxy (ports 9000, 9001, 9002; --ports), joined by a mesh with emulated
WAN delays; drives a compressed, phase-shifted day through them, first with
forwarding off and then through SkyWalker, with a live view; prints what the
clients measured; and keeps serving for your own OpenAI client. The
processes' logs go to a file of the run's own (its path printed first; or
--log-file), so the terminal shows only the view.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlags(atLeast("duration", opt.Duration.Seconds(), 0)); err != nil {
				return err
			}
			if len(ports) != len(demo.DefaultPorts) {
				return fmt.Errorf("--ports wants %d ports (us-east, eu-west, ap-east), not %d", len(demo.DefaultPorts), len(ports))
			}
			for _, p := range ports {
				if p < 0 || p > 65535 {
					return fmt.Errorf("--ports: %d is not a port", p)
				}
			}
			opt.Ports = ports
			// Each run logs to a file of its own: a second demo on the
			// machine never truncates the first one's log.
			var f *os.File
			var err error
			if opt.LogPath == "" {
				f, err = os.CreateTemp("", "skywalker-demo-*.log")
			} else {
				f, err = os.Create(opt.LogPath)
			}
			if err != nil {
				return fmt.Errorf("--log-file: %w", err)
			}
			defer f.Close()
			opt.LogPath = f.Name()
			fmt.Fprintf(cmd.ErrOrStderr(), "logs of this run (proxies, engines, mesh): %s\n", opt.LogPath)
			if opt.Logger, err = logs.logger(f); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opt.Stdout, opt.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			opt.Live = isTerminal(opt.Stdout)
			if opt.JSON {
				opt.Live = isTerminal(opt.Stderr)
			}
			_, err = demo.Run(ctx, opt)
			return err
		},
	}
	cmd.Flags().DurationVar(&opt.Duration, "duration", 0, "exit after this long (e.g. 20s); default: run the days, then serve until Ctrl-C")
	cmd.Flags().BoolVar(&opt.JSON, "json", false, "print the final summary as JSON")
	cmd.Flags().StringVar(&opt.LogPath, "log-file", "", "where the proxies, engines and mesh log (default: a new skywalker-demo-*.log in the temporary directory, its path printed first)")
	cmd.Flags().IntSliceVar(&ports, "ports", demo.DefaultPorts, "the three proxies' ports (us-east, eu-west, ap-east); 0 picks a free one")
	return cmd
}
