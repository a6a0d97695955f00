"""Which text styles of an OpenDocument text are inline code (issue 46), so that nmt.translation.documents.odt keeps
a span in one as written, as inline code is kept in Markdown, HTML and Word.

A style is code by its name: a character style of code (CODE_STYLES: LibreOffice's Source Text, Teletype and User
Entry, pandoc's Source_Text), or one deriving from it (`style:parent-style-name`: LibreOffice's automatic style T3
for code made bold); or by its font: the nearest `style:text-properties` up its parent chain names a monospaced font
(nmt.translation.documents.codefont), by `style:font-name` (a font-face declaration of office:font-face-decls, with
its family and maybe `style:font-pitch="fixed"`) or by `fo:font-family`. LibreOffice writes inline code it imports
from a .docx or an HTML page's `<span style="font-family: monospace">` so: `<text:span text:style-name="T3">` with
T3 an automatic style (office:automatic-styles) whose only mark is `style:font-name="Liberation Mono"`.

A part's automatic styles are its own; its named styles (office:styles) and their fonts are in styles.xml, which
content.xml's styles derive from."""

from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from nmt.translation.documents.codefont import monospaced

STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
SVG = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
# Character styles of inline code (style:name, spaces written "_20_"): LibreOffice's "Source Text", "Teletype" and
# "User Entry", pandoc's Source_Text.
CODE_STYLES = frozenset({"Source_20_Text", "Source_Text", "Teletype", "User_20_Entry"})
BY_NAME, BY_FONT = "name", "font"  # how a style is code: by its name (always kept), by its font (among prose)
MAX_CHAIN = 64  # parent styles followed up from a style (a cycle or a longer chain stops there)


@dataclass
class StyleTable:
    """A part's font-face declarations (name -> family, pitch) and text styles (name -> parent, `style:font-name`,
    `fo:font-family`)."""

    fonts: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    styles: dict[str, tuple[str | None, str | None, str | None]] = field(default_factory=dict)

    @classmethod
    def read(cls, root: etree._Element, automatic: bool = True) -> StyleTable:
        """The declarations and text styles of a part's root (office:document-content or -styles); `automatic`:
        its automatic styles too (False: only the named ones, which other parts may derive from)."""
        table = cls()
        for decls in root.iterchildren(f"{{{OFFICE}}}font-face-decls"):
            for face in decls.iterchildren(f"{{{STYLE}}}font-face"):
                table.fonts[face.get(f"{{{STYLE}}}name", "")] = (face.get(f"{{{SVG}}}font-family", ""),
                                                                 face.get(f"{{{STYLE}}}font-pitch"))
        kinds = ["styles"] + (["automatic-styles"] if automatic else [])
        for styles in (s for kind in kinds for s in root.iterchildren(f"{{{OFFICE}}}{kind}")):
            for style in styles.iterchildren(f"{{{STYLE}}}style"):
                if style.get(f"{{{STYLE}}}family") != "text":
                    continue
                props = style.find(f"{{{STYLE}}}text-properties")
                font, family = (None, None) if props is None else (props.get(f"{{{STYLE}}}font-name"),
                                                                   props.get(f"{{{FO}}}font-family"))
                table.styles[style.get(f"{{{STYLE}}}name", "")] = (style.get(f"{{{STYLE}}}parent-style-name"),
                                                                    font, family)
        return table

    def merged(self, own: StyleTable) -> StyleTable:
        """This table (styles.xml's named styles) with a part's `own` declarations and styles over it."""
        return StyleTable({**self.fonts, **own.fonts}, {**self.styles, **own.styles})

    def code(self) -> dict[str, str]:
        """Every text style that is code: its name -> BY_NAME or BY_FONT (CODE_STYLES included, declared or not)."""
        out = dict.fromkeys(CODE_STYLES, BY_NAME)
        for name in self.styles:
            kind = self._kind(name)
            if kind is not None:
                out[name] = kind
        return out

    def _kind(self, name: str | None) -> str | None:
        """A code style's name anywhere up the chain makes it code; else the nearest font decides."""
        font: bool | None = None
        seen: set[str] = set()
        while name is not None and name not in seen and len(seen) < MAX_CHAIN:
            if name in CODE_STYLES:
                return BY_NAME
            seen.add(name)
            if name not in self.styles:
                break
            name, face, family = self.styles[name]
            if font is None and (face or family):
                font = self._monospaced(face, family)
        return BY_FONT if font else None

    def _monospaced(self, face: str | None, family: str | None) -> bool:
        if face:
            declared, pitch = self.fonts.get(face, ("", None))
            return monospaced(face, declared, pitch=pitch)
        return monospaced(*(family or "").split(","))
