"""ODT paragraphs holding XML nodes that are not elements (issue 46, odfpy's tests/examples/nasty.odt: a DOCTYPE
declaring an external entity, "<text:p>Test: &nasty;</text:p>"): comments, processing instructions and entity
references are atoms kept in their place, the text around them translated, the entity never resolved."""

from __future__ import annotations

import zipfile
from pathlib import Path

from nmt.translation.documents import odt as odt_format
from tests.helpers.documents import reverse_upper

TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE_NS = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"


def nasty_odt(path: Path, paragraphs: str, entity_target: str) -> Path:
    """An .odt as odfpy's nasty.odt is written: a DOCTYPE with an external entity, then the body."""
    content = (f"<?xml version='1.0' encoding='UTF-8'?>\n<!DOCTYPE nasty [ <!ENTITY nasty SYSTEM \"{entity_target}\">]>"
               f'\n<office:document-content\nxmlns:text="{TEXT_NS}"\nxmlns:office="{OFFICE_NS}"\noffice:version="1.2">'
               f"<office:automatic-styles/><office:body><office:text>\n{paragraphs}\n</office:text></office:body>"
               "</office:document-content>\n")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text", zipfile.ZIP_STORED)
        z.writestr("content.xml", content)
    return path


def test_nasty_odt_entity_is_kept_and_never_resolved(tmp_path: Path) -> None:
    secret = tmp_path / "externalcontent.txt"
    secret.write_text("SECRET FILE CONTENT")
    src = nasty_odt(tmp_path / "nasty.odt", "<text:p>Test: &nasty;</text:p>", secret.as_uri())
    assert odt_format.translate(src, tmp_path / "out.odt", reverse_upper) == 1
    with zipfile.ZipFile(tmp_path / "out.odt") as z:
        content = z.read("content.xml").decode()
    assert "<text:p>TEST: &nasty;</text:p>" in content and "SECRET" not in content
    assert "<!ENTITY nasty SYSTEM" in content  # the DOCTYPE written back


def test_comments_pis_and_entities_inside_spans_and_alone(tmp_path: Path) -> None:
    paragraphs = ('<text:p>the <text:span text:style-name="b">red <!-- c --> big</text:span> car &nasty; goes</text:p>'
                  '<text:p>the <text:span>&nasty;</text:span> car<?pi x?> goes.</text:p><text:h><!-- only --></text:h>')
    src = nasty_odt(tmp_path / "n.odt", paragraphs, "missing.txt")
    assert odt_format.translate(src, tmp_path / "out.odt", reverse_upper) == 2  # the heading has no text
    with zipfile.ZipFile(tmp_path / "out.odt") as z:
        content = z.read("content.xml").decode()
    assert '<text:span text:style-name="b">BIG RED <!-- c --></text:span>' in content
    assert "CAR &nasty; " in content and "<?pi x?>" in content and "<text:span>&nasty;</text:span>" in content
    assert "<text:h><!-- only --></text:h>" in content
