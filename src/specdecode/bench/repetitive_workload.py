"""The bench's repetitive workload, `data/repetitive.jsonl` (made for this project, same licence as
the code), and how it is made: deterministically, so the shipped file is what `rows()` returns
(`python -m specdecode.bench.repetitive_workload` writes it again).

- extraction (40): short, different texts about a person, each to be put into one JSON schema;
  what repeats across requests is the schema, the keys and the answer's shape.
- code_edit (4 conversations of 4 turns): a small Python module, then three changes, each answered
  with the whole updated code (run with `bench --turns all`).
"""

import json
import random
from pathlib import Path

FIRST = ["Maria", "James", "Aiko", "Lars", "Priya", "Tomasz", "Chen", "Fatima", "Diego", "Ingrid", "Kwame", "Sofia",
         "Omar", "Hannah", "Ravi", "Elena", "Jonas", "Mei", "Lucas", "Amara"]
LAST = ["Okafor", "Lindqvist", "Tanaka", "Novak", "Ramirez", "Schmidt", "Haddad", "O'Brien", "Kowalski", "Mensah",
        "Rossi", "Patel", "Dubois", "Nakamura", "Silva", "Jensen", "Ahmed", "Fischer", "Moreau", "Costa"]
COMPANIES = ["Northwind Logistics", "Bluefin Analytics", "Helios Energy", "Quarry Labs", "Maple & Finch Legal",
             "Orbital Foods", "Tidewater Health", "Copperline Robotics", "Summit Ledger", "Greenway Transit"]
ROLES = ["data engineer", "head of procurement", "senior nurse", "product manager", "tax advisor",
         "robotics technician", "chief financial officer", "UX researcher", "site reliability engineer",
         "marketing lead"]
CITIES = ["Lisbon", "Osaka", "Toronto", "Nairobi", "Krakow", "Melbourne", "Austin", "Lyon", "Gothenburg", "Pune"]
OPENERS = [
    "Yesterday I had a call with {name}, who works as {role_a} at {company} in {city}.",
    "Please add {name} to the partner list: {role} at {company}, based in {city}.",
    "Meeting notes. Attendee: {name} ({company}). Role: {role}. Office: {city}.",
    "{name} joined {company} last spring and now leads the team in {city} as {role}.",
    "Forwarded message from {name}, {role} at {company} ({city} office):",
]
CONTACTS = [
    " You can reach them at {email} or {phone}.",
    " Email: {email}. Phone: {phone}.",
    " Their email is {email}; no phone number was given.",
    " Call {phone} during office hours.",
    " Contact: {email}, tel. {phone}.",
]
TAILS = ["", " They asked for the quarterly report by Friday.", " Follow up next week about the contract.",
         " They prefer meetings in the morning.", " Remember to send the signed agreement."]
SCHEMA = ('{"name": string, "company": string, "role": string, "city": string, "email": string or null, '
          '"phone": string or null}')
INSTRUCTION = ("Extract the contact details from the text below into a JSON object with exactly these keys: "
               f"{SCHEMA}. Use null for anything the text does not give. Reply with the JSON object only.\n\n"
               "Text: ")

CONVERSATIONS = [
    ("inventory.py", '''class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, count):
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count):
        self.items[name] -= count

    def total(self):
        return sum(self.items.values())
''', ["Make remove() raise ValueError when there are not enough items.",
      "Add a method report() that returns the items sorted by name as a list of (name, count) pairs.",
      "Add type hints to every method."]),
    ("temperature.py", '''def to_fahrenheit(celsius):
    return celsius * 9 / 5 + 32


def to_celsius(fahrenheit):
    return (fahrenheit - 32) * 5 / 9


def average(readings):
    return sum(readings) / len(readings)
''', ["Make average() return None for an empty list.",
      "Add a function to_kelvin(celsius) beside the others.",
      "Add a docstring to every function."]),
    ("bank.py", '''class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance

    def deposit(self, amount):
        self.balance += amount

    def withdraw(self, amount):
        self.balance -= amount
''', ["Refuse negative amounts in deposit() and withdraw() with ValueError.",
      "Keep a list of transactions (kind, amount) in the account and append to it in both methods.",
      "Add a __repr__ that shows the owner and the balance."]),
    ("textstats.py", '''def word_count(text):
    return len(text.split())


def longest_word(text):
    return max(text.split(), key=len)


def char_frequency(text):
    counts = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    return counts
''', ["Make longest_word() return an empty string for empty text.",
      "Make char_frequency() ignore spaces and count letters case-insensitively.",
      "Add a function sentence_count(text) that counts sentences ending in '.', '!' or '?'."]),
]


def extraction(rng: random.Random) -> list[dict]:
    rows = []
    for i in range(40):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        name = f"{first} {last}"
        role = rng.choice(ROLES)
        values = dict(name=name, role=role, role_a=("an " if role[0] in "aeiou" else "a ") + role,
                      company=rng.choice(COMPANIES), city=rng.choice(CITIES),
                      email=f"{first.lower()}.{last.lower().replace(chr(39), '')}@example.{rng.choice(['com', 'org', 'net'])}",
                      phone=f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}")
        text = rng.choice(OPENERS).format(**values) + rng.choice(CONTACTS).format(**values) + rng.choice(TAILS)
        rows.append({"question_id": f"extract-{i + 1:02d}", "category": "extraction", "turns": [INSTRUCTION + text]})
    return rows


def code_edit() -> list[dict]:
    rows = []
    for n, (name, code, changes) in enumerate(CONVERSATIONS, start=1):
        turns = [f"Here is {name}:\n\n```python\n{code}```\n\nRename nothing and keep the style. "
                 "Reply with the whole file in one code block."]
        turns += [f"{change} Reply with the whole updated file in one code block." for change in changes]
        rows.append({"question_id": f"edit-{n}", "category": "code_edit", "turns": turns})
    return rows


def rows() -> list[dict]:
    return extraction(random.Random(7)) + code_edit()


def jsonl() -> str:
    return "".join(json.dumps(r) + "\n" for r in rows())


def main() -> None:
    path = Path(__file__).resolve().parent.parent / "data" / "repetitive.jsonl"
    path.write_text(jsonl(), encoding="utf-8")
    print(f"wrote {len(rows())} prompts to {path}")


if __name__ == "__main__":
    main()
