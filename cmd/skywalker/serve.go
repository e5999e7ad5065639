package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"skywalker/internal/node"
	"skywalker/internal/proxy"
	"skywalker/internal/tracing"
)

func newServeCommand(logs *logFlags) *cobra.Command {
	var configFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the regional proxy in front of this region's vLLM/SGLang replicas",
		Long: `serve is SkyWalker's regional proxy: an OpenAI-compatible endpoint that routes
every request to a local replica or, when another region would answer sooner,
forwards it once to that region's proxy. Every setting is a flag, an
environment variable (shown in brackets) and a key of the --config YAML file;
flags win over the environment, the environment over the file, the file over
the defaults.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadServeConfig(cmd.Flags(), configFile, os.Getenv)
			if err != nil {
				return err
			}
			log, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML configuration file")
	for _, s := range proxy.Settings() {
		usage := s.Help + " (" + s.Env + ")"
		switch {
		case strings.HasPrefix(s.Derived, "required"):
			usage = s.Help + " (" + s.Env + "; " + s.Derived + ")"
		case s.Derived != "":
			usage = s.Help + " (" + s.Env + "; default " + s.Derived + ")"
		}
		flag := f.VarPF(&settingFlag{setting: s}, s.Flag, "", usage)
		if def := proxy.DefaultConfig(); s.Derived == "" {
			flag.DefValue = s.Format(&def)
		}
		if s.IsBool() {
			flag.NoOptDefVal = "true"
		}
	}
	return cmd
}

// settingFlag is one proxy setting as a flag: its text is checked when
// given and applied after the file and the environment.
type settingFlag struct {
	setting proxy.Setting
	text    string
}

func (f *settingFlag) Set(text string) error {
	var scratch proxy.Config
	if err := f.setting.Set(&scratch, text); err != nil {
		return err
	}
	f.text = text
	return nil
}

func (f *settingFlag) String() string { return f.text }
func (f *settingFlag) Type() string   { return f.setting.Type() }

// loadServeConfig applies defaults < file < environment < the flags given.
func loadServeConfig(flags *pflag.FlagSet, file string, getenv func(string) string) (proxy.Config, error) {
	cfg := proxy.DefaultConfig()
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w", err)
		}
		if err := cfg.ApplyYAML(data); err != nil {
			return cfg, err
		}
	}
	if err := cfg.ApplyEnv(getenv); err != nil {
		return cfg, err
	}
	var errs []error
	flags.Visit(func(f *pflag.Flag) {
		if sf, ok := f.Value.(*settingFlag); ok {
			if err := sf.setting.Set(&cfg, sf.text); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", f.Name, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// runServe runs one proxy with its mesh node until ctx ends, then drains
// and leaves the mesh.
func runServe(ctx context.Context, cfg proxy.Config, log *slog.Logger) error {
	tracer, err := tracing.New(ctx, "skywalker", cfg.Region, os.Getenv) // the OTEL_* variables; off without an endpoint
	if err != nil {
		return err
	}
	defer shutdownTracer(tracer, log)
	n, err := node.Start(ctx, node.Options{Proxy: cfg, Logger: log, Version: version, Tracer: tracer})
	if err != nil {
		return err
	}
	go n.KeepJoined(ctx, 5*time.Second, node.RejoinEvery)
	gossip := ""
	if n.Mesh != nil {
		gossip = n.Mesh.Addr()
	}
	log.Info("serving", "region", cfg.Region, "addr", n.Config().Listen, "url", n.URL, "gossip", gossip, "policy", cfg.Policy)
	select {
	case err := <-n.Served():
		n.Kill()
		return err
	case <-ctx.Done():
	}
	return n.Shutdown()
}

// shutdownTracer exports the spans still buffered, within 5 s.
func shutdownTracer(t *tracing.Tracer, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans not exported at exit", "err", err)
	}
}
