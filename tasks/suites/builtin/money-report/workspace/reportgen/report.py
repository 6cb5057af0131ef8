"""Rows to text."""

from reportgen.amounts import money, parse_amount


def render(rows):
    lines = [f"{row['item']:<20}{money(parse_amount(row['amount'])):>12}" for row in rows]
    total = sum(parse_amount(row["amount"]) for row in rows)
    lines.append(f"TOTAL {money(total)}")
    return "\n".join(lines)
