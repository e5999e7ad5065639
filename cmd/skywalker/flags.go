package main

import (
	"fmt"
	"strconv"
)

// flagRule is a bound a numeric flag's value must respect.
type flagRule struct {
	name  string
	value float64
	ok    bool
	want  string // "above 0", "in 0..1"
}

func above(name string, v, lo float64) flagRule {
	return flagRule{name, v, v > lo, "above " + num(lo)}
}

func atLeast(name string, v, lo float64) flagRule {
	return flagRule{name, v, v >= lo, num(lo) + " or more"}
}

func within(name string, v, lo, hi float64) flagRule {
	return flagRule{name, v, v >= lo && v <= hi, "in " + num(lo) + ".." + num(hi)}
}

func num(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// checkFlags returns an error naming the first flag out of its bounds.
func checkFlags(rules ...flagRule) error {
	for _, r := range rules {
		if !r.ok {
			return fmt.Errorf("--%s must be %s, not %s", r.name, r.want, num(r.value))
		}
	}
	return nil
}
