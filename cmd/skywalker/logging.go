package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
)

// logFlags are the root's --log-format and --log-level, shared by every
// command that logs.
type logFlags struct {
	format, level string
}

func (lf *logFlags) register(root *cobra.Command) {
	root.PersistentFlags().StringVar(&lf.format, "log-format", "auto", "log format: text, json, or auto (text on a terminal, JSON otherwise)")
	root.PersistentFlags().StringVar(&lf.level, "log-level", "info", "least severe level logged: debug, info, warn or error")
}

// logger builds the process's one logger on w: one format for every
// line, durations written as strings ("1.5s", not nanoseconds).
func (lf *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(lf.level)); err != nil {
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, not %q", lf.level)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			return slog.String(a.Key, a.Value.Duration().String())
		}
		return a
	}}
	format := lf.format
	if format == "auto" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format must be text, json or auto, not %q", lf.format)
	}
}
