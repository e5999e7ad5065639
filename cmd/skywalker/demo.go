package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"skywalker/internal/demo"
)

func newDemoCommand() *cobra.Command {
	var opt demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole 3-region SkyWalker mesh on this machine and drive a day of traffic through it",
		Long: `demo starts three regions (us-east, eu-west, ap-east), each with two simulated
engines and a proxy (ports 9000, 9001, 9002), joined by a mesh with emulated
WAN delays; drives a compressed, phase-shifted day through them, first with
forwarding off and then through SkyWalker, with a live view; prints what the
clients measured; and keeps serving for your own OpenAI client.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opt.Stdout, opt.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			opt.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			_, err := demo.Run(ctx, opt)
			return err
		},
	}
	cmd.Flags().DurationVar(&opt.Duration, "duration", 0, "exit after this long (e.g. 20s); default: run the days, then serve until Ctrl-C")
	cmd.Flags().BoolVar(&opt.JSON, "json", false, "print the final summary as JSON")
	return cmd
}
