// Package report renders simulation and planning results: aligned text
// tables, Markdown tables for the README, JSON, and SVG plots made with
// gonum/plot. It only formats; it computes nothing the results do not hold.
package report
