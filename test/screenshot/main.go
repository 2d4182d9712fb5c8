// Command screenshot renders a terminal capture (tmux capture-pane -e -p)
// as an SVG picture, cell by cell, as a terminal draws it: colours,
// backgrounds, bold and faint, wide characters on two cells. make
// screenshot turns it into the README's PNG with rsvg-convert. The capture
// is parsed by a terminal emulator (charmbracelet/x/vt), not by hand.
//
//	screenshot -cols 120 -rows 34 capture.ansi > shot.svg
package main

import (
	"bytes"
	"flag"
	"fmt"
	"html"
	"image/color"
	"io"
	"os"
	"strings"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// The cell size in SVG units for a 14px monospace font, and the theme.
const (
	cellW, cellH = 8.4, 18.0
	pad          = 16.0
	fontSize     = 14.0
	fontFamily   = "JetBrains Mono, DejaVu Sans Mono, monospace"
)

var (
	defaultFg = color.RGBA{0xd8, 0xd8, 0xd8, 0xff}
	defaultBg = color.RGBA{0x16, 0x18, 0x1d, 0xff}
	// The 16 colours the dashboard uses (it keeps to the user's own
	// palette), as a common dark theme draws them.
	palette = [16]uint32{
		0x282c34, 0xe06c75, 0x98c379, 0xe5c07b, 0x61afef, 0xc678dd, 0x56b6c2, 0xabb2bf,
		0x5c6370, 0xe06c75, 0x98c379, 0xe5c07b, 0x61afef, 0xc678dd, 0x56b6c2, 0xffffff,
	}
)

func main() {
	cols := flag.Int("cols", 120, "the capture's width in cells")
	rows := flag.Int("rows", 34, "the capture's height in cells")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: screenshot [-cols N] [-rows N] CAPTURE > out.svg")
		os.Exit(2)
	}
	raw, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "screenshot:", err)
		os.Exit(1)
	}
	if err := render(os.Stdout, raw, *cols, *rows); err != nil {
		fmt.Fprintln(os.Stderr, "screenshot:", err)
		os.Exit(1)
	}
}

// render draws the capture raw, cols by rows cells, to w as SVG.
func render(w io.Writer, raw []byte, cols, rows int) error {
	emu := vt.NewEmulator(cols, rows)
	// capture-pane ends lines with \n alone; a terminal needs the return.
	raw = bytes.ReplaceAll(bytes.TrimRight(raw, "\n"), []byte("\n"), []byte("\r\n"))
	if _, err := emu.Write(raw); err != nil {
		return err
	}
	width, height := 2*pad+float64(cols)*cellW, 2*pad+float64(rows)*cellH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" rx="8" fill="%s"/>`+"\n", hex(defaultBg))
	fmt.Fprintf(&b, `<g font-family="%s" font-size="%.0f" xml:space="preserve">`+"\n", fontFamily, fontSize)
	for y := 0; y < rows; y++ {
		for x := 0; x < cols; x++ {
			c := emu.CellAt(x, y)
			if c == nil || c.Width == 0 {
				continue // the second half of a wide character
			}
			fg, bg := colors(c.Style)
			px, py := pad+float64(x)*cellW, pad+float64(y)*cellH
			if bg != defaultBg {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
					px, py, cellW*float64(max(c.Width, 1)), cellH, hex(bg))
			}
			if strings.TrimSpace(c.Content) == "" {
				continue
			}
			weight := ""
			if c.Style.Attrs&uv.AttrBold != 0 {
				weight = ` font-weight="bold"`
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s"%s>%s</text>`+"\n",
				px, py+cellH*0.78, hex(fg), weight, html.EscapeString(c.Content))
		}
	}
	b.WriteString("</g>\n</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// colors are the cell's foreground and background as drawn: defaults
// filled in, reverse swapped, faint dimmed.
func colors(s uv.Style) (fg, bg color.RGBA) {
	fg, bg = rgba(s.Fg, defaultFg), rgba(s.Bg, defaultBg)
	if s.Attrs&uv.AttrReverse != 0 {
		fg, bg = bg, fg
	}
	if s.Attrs&uv.AttrFaint != 0 {
		fg = color.RGBA{(fg.R + bg.R) / 2, (fg.G + bg.G) / 2, (fg.B + bg.B) / 2, 0xff}
	}
	return fg, bg
}

func rgba(c color.Color, def color.RGBA) color.RGBA {
	switch c := c.(type) {
	case nil:
		return def
	case ansi.BasicColor:
		p := palette[c&15]
		return color.RGBA{uint8(p >> 16), uint8(p >> 8), uint8(p), 0xff}
	}
	r, g, b, _ := c.RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0xff}
}

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }
