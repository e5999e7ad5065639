// Package arch holds no code: its test checks the import rules between
// the product's packages (which layer may depend on which).
package arch
