// Command skywalker is the SkyWalker cross-region LLM load balancer: the
// regional proxy, a simulated inference engine, the simulator, the capacity
// planner and a one-command demo, in one binary. Each subcommand lives in
// its own file here and only wires flags to the internal packages.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// version is the software version, overridden at link time with
// -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "skywalker:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "skywalker",
		Short:         "A locality-aware, cross-region load balancer for LLM inference",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var cpuProfile string
	var profileFile *os.File
	root.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the command to this file (for go tool pprof)")
	_ = root.PersistentFlags().MarkHidden("cpuprofile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		profileFile = f
		return pprof.StartCPUProfile(f)
	}
	root.PersistentPostRunE = func(*cobra.Command, []string) error {
		if profileFile == nil {
			return nil
		}
		pprof.StopCPUProfile()
		return profileFile.Close()
	}
	logs := &logFlags{}
	logs.register(root)
	root.AddCommand(newExplainCommand(), newEngineCommand(logs), newSimCommand(), newServeCommand(logs), newPlanCommand(), newDemoCommand(logs), newBenchCommand(), newEvalCommand())
	return root
}
