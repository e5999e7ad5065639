package report

import (
	"encoding/xml"
	"os"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
)

// svgText is one text element of a gonum/plot SVG, in canvas
// coordinates (x right, y down from the top).
type svgText struct {
	text          string
	x, y, size    float64
	rotated       bool
	width, height float64
}

// readSVG parses a figure written by SaveSVG: its canvas size and texts.
// A text's width is measured with the font gonum/plot drew it in
// (Liberation Serif), so the check is as exact as the drawing.
func readSVG(t *testing.T, path string) (w, h float64, texts []svgText) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(data)))
	var cur *svgText
	var rotatedGroups []bool // per open <g>: does it rotate?
	inRotation := func() bool {
		for _, r := range rotatedGroups {
			if r {
				return true
			}
		}
		return false
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch el := tok.(type) {
		case xml.StartElement:
			attr := func(name string) string {
				for _, a := range el.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			switch el.Name.Local {
			case "g":
				rotatedGroups = append(rotatedGroups, strings.Contains(attr("transform"), "rotate"))
			case "svg":
				if vb := strings.Fields(attr("viewBox")); len(vb) == 4 {
					w, _ = strconv.ParseFloat(vb[2], 64)
					h, _ = strconv.ParseFloat(vb[3], 64)
				}
			case "text":
				x, _ := strconv.ParseFloat(attr("x"), 64)
				y, _ := strconv.ParseFloat(attr("y"), 64)
				size := 10.0
				if i := strings.Index(attr("style"), "font-size:"); i >= 0 {
					v := strings.TrimSuffix(strings.SplitN(attr("style")[i+len("font-size:"):], ";", 2)[0], "px")
					size, _ = strconv.ParseFloat(v, 64)
				}
				cur = &svgText{x: x, y: -y, size: size, rotated: inRotation() || strings.Contains(attr("transform"), "rotate")}
			}
		case xml.CharData:
			if cur != nil {
				cur.text += string(el)
			}
		case xml.EndElement:
			if el.Name.Local == "g" && len(rotatedGroups) > 0 {
				rotatedGroups = rotatedGroups[:len(rotatedGroups)-1]
			}
			if el.Name.Local == "text" && cur != nil {
				face := font.DefaultCache.Lookup(plot.DefaultFont, vg.Length(cur.size))
				cur.width = face.Width(cur.text).Points()
				// ASCII glyphs (ascenders, parentheses) rise at most 0.75 em
				// above the baseline in Liberation Serif; the face's ascent
				// also covers accented capitals, which no label has.
				cur.height = 0.75 * cur.size
				// gonum's y is the baseline in flipped space: the glyphs rise
				// above it; convert to canvas y measured from the top.
				cur.y = h - cur.y
				texts = append(texts, *cur)
				cur = nil
			}
		}
	}
	if w == 0 || h == 0 {
		t.Fatalf("%s: no canvas size", path)
	}
	return w, h, texts
}

// checkFigure asserts that no text of the figure overflows its canvas and
// that no two texts overlap (as bar labels once collided).
func checkFigure(t *testing.T, path string) {
	t.Helper()
	w, h, texts := readSVG(t, path)
	if len(texts) == 0 {
		t.Errorf("%s: no text at all", path)
	}
	for _, tx := range texts {
		if tx.rotated {
			continue // the y-axis label: gonum places it inside the margin it reserves
		}
		if tx.x < -0.5 || tx.x+tx.width > w+0.5 || tx.y-tx.height < -0.5 || tx.y > h+0.5 {
			t.Errorf("%s: %q at (%.0f, %.0f), about %.0f wide, overflows the %.0f × %.0f canvas", path, tx.text, tx.x, tx.y, tx.width, w, h)
		}
	}
	for i, a := range texts {
		for _, b := range texts[i+1:] {
			if a.rotated || b.rotated || strings.TrimSpace(a.text) == "" || strings.TrimSpace(b.text) == "" {
				continue
			}
			// Same line (baselines closer than half a glyph) and overlapping spans.
			if abs(a.y-b.y) < 0.5*min(a.height, b.height) && a.x < b.x+b.width-1 && b.x < a.x+a.width-1 {
				t.Errorf("%s: %q and %q overlap", path, a.text, b.text)
			}
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
