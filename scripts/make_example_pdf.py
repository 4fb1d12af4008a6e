"""Regenerate examples/corpus/boiling-point.pdf (two pages of text written for the project, CC0).

Needs reportlab (``pip install reportlab``; not a runtime dependency: the PDF is committed).
Run: python scripts/make_example_pdf.py
"""

from __future__ import annotations

from pathlib import Path

PAGES = [
    ("Why water boils at lower temperatures on mountains", [
        "At sea level, under a standard atmospheric pressure of 101.325 kilopascals, pure water",
        "boils at 100 degrees Celsius (212 degrees Fahrenheit). Water boils when its vapour",
        "pressure equals the pressure of the air above it.",
        "",
        "Air pressure falls with altitude, so water boils at a lower temperature on a mountain.",
        "As a rule of thumb the boiling point drops by about one degree Celsius for every",
        "300 metres of climb. In Denver, about 1,600 metres above sea level, water boils at",
        "around 95 degrees Celsius. On the summit of Mount Everest, 8,849 metres high, where",
        "the air pressure is about a third of that at sea level, water boils at roughly",
        "70 degrees Celsius.",
    ]),
    ("Cooking at altitude", [
        "Because the water is cooler when it boils, food takes longer to cook at altitude:",
        "pasta, rice and boiled eggs all need more time. Boiling water longer does not make",
        "it hotter; the extra heat only turns more of it into steam.",
        "",
        "A pressure cooker solves the problem by sealing the pot. The steam raises the",
        "pressure inside to about twice the sea-level pressure, and water then boils at",
        "about 120 degrees Celsius, so food cooks faster at any altitude.",
        "",
        "Written for the sanctuary-local examples. Public domain (CC0).",
    ]),
]


def main() -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = Path(__file__).resolve().parent.parent / "examples" / "corpus" / "boiling-point.pdf"
    c = canvas.Canvas(str(out), pagesize=A4, invariant=1)  # invariant: byte-identical reruns
    c.setTitle("Why water boils at lower temperatures on mountains")
    for title, lines in PAGES:
        c.setFont("Helvetica-Bold", 14)
        c.drawString(60, 780, title)
        c.setFont("Helvetica", 11)
        y = 750
        for line in lines:
            c.drawString(60, y, line)
            y -= 16
        c.showPage()
    c.save()
    print(out)


if __name__ == "__main__":
    main()
