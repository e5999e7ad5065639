package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"skywalker/internal/explain"
)

func newExplainCommand() *cobra.Command {
	var (
		example  string
		policies string
		format   string
	)
	cmd := &cobra.Command{
		Use:   "explain [SITUATION.yaml]",
		Short: "Show what every routing policy decides for one request in one situation",
		Long: `explain routes one request, arriving at one region with a given view of
its replicas and peer regions, through every policy and prints each decision.

With no file it uses a built-in situation (--example); the default is the
design's worked example. Copy one as a starting point:

  skywalker explain --print-example > mine.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if len(args) == 1 {
				data, err = os.ReadFile(args[0])
			} else {
				data, err = explain.Example(example)
			}
			if err != nil {
				return err
			}
			if printOnly, _ := cmd.Flags().GetBool("print-example"); printOnly {
				_, err = cmd.OutOrStdout().Write(data)
				return err
			}
			s, err := explain.Parse(data)
			if err != nil {
				return err
			}
			var names []string
			if policies != "" {
				names = strings.Split(policies, ",")
			}
			rows, err := s.Evaluate(names)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch format {
			case "json":
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"title": s.Title, "decisions": rows})
			case "table":
				if s.Title != "" {
					fmt.Fprintf(out, "%s\n\n", s.Title)
				}
				return explain.WriteTable(out, rows)
			default:
				return fmt.Errorf("--format must be table or json, not %q", format)
			}
		},
	}
	cmd.Flags().StringVar(&example, "example", explain.DefaultExample, "built-in situation to use without a file ("+strings.Join(explain.ExampleNames(), ", ")+")")
	cmd.Flags().StringVar(&policies, "policies", "", "comma-separated policies (default: all)")
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	cmd.Flags().Bool("print-example", false, "print the situation YAML instead of evaluating it")
	return cmd
}
