"""The filings profile's glossary: analysts' terms, and the words of the lines that hold them.

A question asks for a measure ("working capital", "free cash flow", "capex"); a filing prints the lines it is
computed from ("Total current assets", "Purchases of property, plant and equipment") in a statement whose title
names it ("Consolidated Balance Sheets"). Words alone cannot meet there, and the small local model cannot bridge
the gap either, so the glossary adds each measure's lines and statement to the words a question is ranked by,
where the question reaches filings (``search.profiles``: a question over papers or manuals gets none of it).

The table is textbook definitions of common financial measures (how each is computed, from which statement), not
answers: it names no company, year or document. Measured on FinanceBench with ``minions bench evidence
--lexical-only`` (docs/local-reading.md), where most questions ask for such measures; a question that names none
is ranked as before.
"""

from __future__ import annotations

__all__ = ["GLOSSARY"]

_BALANCE = "consolidated balance sheet"
_INCOME = "consolidated statement of operations income earnings"
_CASH_FLOWS = "consolidated statement of cash flows"

GLOSSARY: tuple[tuple[str, str], ...] = (
    # liquidity and the balance sheet
    (r"working capital", f"total current assets total current liabilities {_BALANCE}"),
    (
        r"quick ratio|acid.test",
        f"total current assets total current liabilities cash receivable inventories {_BALANCE}",
    ),
    (r"current ratio|liquidity", f"total current assets total current liabilities {_BALANCE}"),
    (r"\bpp&?n?e\b|fixed assets", f"property plant equipment net {_BALANCE}"),
    (r"total assets", f"total assets {_BALANCE}"),
    (r"debt.to.equity|leverage|solvency", f"total debt long-term debt total equity {_BALANCE}"),
    (r"return on assets|\broa\b", f"net income total assets {_BALANCE}"),
    (r"return on equity|\broe\b", f"net income total shareholders equity {_BALANCE}"),
    (r"asset turnover", f"total assets revenue {_BALANCE}"),
    (r"inventory turnover|days inventory|\bdio\b", f"inventories cost of sales {_BALANCE}"),
    (r"days payable|\bdpo\b", "accounts payable cost of sales"),
    (r"days sales outstanding|\bdso\b|receivables? turnover", "accounts receivable revenue"),
    # the income statement
    (r"gross (?:profit )?margin", f"gross profit cost of sales revenue {_INCOME}"),
    (r"operating (?:profit )?margin|operating income", f"operating income total revenue {_INCOME}"),
    (r"net (?:income|earnings|profit)", f"net income {_INCOME}"),
    (r"effective tax rate", f"provision for income taxes income before income taxes {_INCOME}"),
    (r"revenue growth|top.?line", "total revenue net sales"),
    (r"\beps\b", "earnings per share diluted"),
    (r"\bcogs\b", "cost of goods sold cost of sales"),
    (r"\bsg&a\b", "selling general administrative expenses"),
    (r"\br&d\b", "research development expense"),
    (r"interest coverage", "interest expense operating income"),
    # cash flows
    (
        r"free cash ?flow|\bfcf\b|cash ?flow conversion|cash conversion",
        "net cash provided by operating activities purchases of property plant equipment capital expenditures "
        f"net income {_CASH_FLOWS}",
    ),
    (
        r"capex|capital expenditure|capital spending",
        f"purchases of property plant equipment capital expenditures investing activities {_CASH_FLOWS}",
    ),
    (
        r"capital.intensive",
        f"property plant equipment net capital expenditures total assets revenue {_BALANCE} {_CASH_FLOWS}",
    ),
    (r"operating cash flow|cash flow from operations", "net cash provided by operating activities"),
    (r"dividend payout|payout ratio", f"cash dividends paid net income {_CASH_FLOWS}"),
    (r"\bebitda\b", f"operating income depreciation amortization {_CASH_FLOWS}"),
    (r"\bd&a\b", "depreciation amortization"),
    (r"share repurchase|buy.?back", "repurchase common stock"),
    # matters a filing reports under its own headings
    (r"legal (?:battles|proceedings|matters)|lawsuits?|litigation", "legal proceedings litigation lawsuits"),
    (r"geograph", "geographic segment regions"),
    (r"\bsegments?\b", "segment reportable"),
    (r"restructuring", "restructuring charges"),
)
"""(pattern over the question, case-insensitive; the words added)."""
