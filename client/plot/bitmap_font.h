// A small 5x7 bitmap font of our own for chart labels: digits, lower-case
// letters (upper case is drawn with them) and the punctuation numbers and
// run names use. Any other character is drawn as a hollow box. g, p, q and y
// reach two rows below the text's height.
#pragma once

#include <string>

#include "client/plot/raster.h"

namespace sbp::plot {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 7;
inline constexpr int kGlyphAdvance = 6;  // the width plus one column of space

// Width and height in pixels of `text` drawn at `scale` (each font pixel a
// scale x scale square).
int TextWidth(const std::string& text, int scale);
inline int TextHeight(int scale) { return kGlyphHeight * scale; }

// Draws `text` with its top-left corner at (x, y).
void DrawText(Raster& raster, int x, int y, const std::string& text, int scale, Rgb color);

// True when the font has a glyph for `c` (upper case counts as lower case).
bool HasGlyph(char c);

}  // namespace sbp::plot
