"""The embedded defaults' keyword routing for families of requests a blind routing audit found
going to `general` (finance and statistics calculations, unit conversions, logic puzzles,
spreadsheets, shell and devops tools, maths and code asked in other languages) and for the
words those lists must not take (an interest-rate outlook, a terminal at the airport); and
creative writing about code or numbers, which stays writing (`creative_requests`)."""

from __future__ import annotations

import pytest

from tests.test_default_config import _lexical_decision


@pytest.mark.parametrize(("text", "decision"), [
    ("my salary is 85k, what's my take home if 22% goes to tax and 6% to my 401k", "reasoning"),
    ("what's the NPV of a project costing 1000 that returns 300 a year for 5 years at 8%",
     "reasoning"),
    ("price goes from 10 to 12 and quantity from 50 to 40, what's the price elasticity",
     "reasoning"),
    ("demand is Q = 100 - 2P and supply is Q = 20 + 2P, find the equilibrium", "reasoning"),
    ("a shirt is 40% off and then another 20% off at the register, whats the total discount",
     "reasoning"),
    ("Kredit über 20.000 € mit 5 % Zinsen auf 4 Jahre, wie hoch ist die monatliche Rate?",
     "reasoning"),
    ("how many cups is 750 ml", "reasoning"),
    ("my p value is 0.03 and alpha is 0.05, what do i conclude", "reasoning"),
    ("12 coins, one is counterfeit, find it in 3 weighings", "reasoning"),
    ("Démontrez que la racine carrée de 2 est irrationnelle", "reasoning"),
    ("時速60kmで2時間半走ると何km進みますか", "reasoning"),
    ("excel formula to sum column B only where column A says paid", "code"),
    ("vlookup returns #N/A even though the value is clearly there", "code"),
    ("necesito una fórmula de excel que cuente las celdas con texto", "code"),
    ("linux which process is using port 8080", "code"),
    ("cron expression for every weekday at 6:30am", "code"),
    ("sed command to replace tabs with 4 spaces in place", "code"),
    ("helm values override for ingress tls secret", "code"),
    ("Deadlock found when trying to get lock; try restarting transaction", "code"),
    ("почему мой react компонент рендерится два раза", "code"),
    # a second blind routing audit (15c)
    ("pandas: how to group by two columns and get the mean of a third", "code"),
    ("Excel: a formula that returns 'Overdue' if D2 is before today", "code"),
    ("Escribe una expresión regular para validar correos electrónicos", "code"),
    ("Ich habe eine CSV. Wie lese ich die mit pandas ein?", "code"),
    ("A shop marks up goods by 40% and then offers a 25% discount. What's the profit "
     "percentage?", "reasoning"),
    ("Is it better to take 20% off and then 10% off, or 30% off once?", "reasoning"),
    ("Q1 2.3M, Q2 2.8M, Q3 2.1M: which quarter had the largest percentage change?",
     "reasoning"),
    ("Knights always tell the truth, knaves always lie. A says B is a knave.", "reasoning"),
    ("甲管单独注满需要6小时，乙管需要9小时，两管同时开需要多久？", "reasoning"),
    ("Bir sayının 3 katının 7 fazlası 40 ise bu sayı kaçtır?", "reasoning"),
    ("Un negozio applica uno sconto del 25% e poi del 10%. Qual è lo sconto totale?",
     "reasoning"),
    # the same words in everyday requests
    ("how do i excel at my new job", "default"),
    ("what's the interest rate outlook for next year", "default"),
    ("the elasticity of my skin is getting worse with age, any tips", "default"),
    ("we spent 3 days in paris and 2 days in rome, what should we see next time", "default"),
    ("what does selenium do for the body", "default"),
    ("we waited 2 hours in the terminal before our 6 am flight", "default"),
    ("I am writing a piece about street performers: a puppeteer, a juggler and a mime",
     "default"),
])
def test_calculation_and_tool_families_route_by_keyword(text: str, decision: str) -> None:
    assert _lexical_decision(text) == decision


@pytest.mark.parametrize(("text", "decision"), [
    ("write a poem about recursion", "default"),
    ("write a limerick about javascript", "default"),
    ("write a rap about kubernetes", "default"),
    ("write a poem about the number pi", "default"),
    ("Write a short poem about a programmer debugging at 3am", "default"),
    ("Escribe un poema sobre el mar y la nostalgia", "default"),
    ("Schreib mir ein Gedicht über Python und Kaffee", "default"),
    # a program that writes them, or a problem beside the poem
    ("write a haiku generator in python", "code"),
    ("write a python function that tells a random joke", "code"),
    ("write a poem generator in Python", "code"),
    ("write me a story script in bash that prints a random tale", "code"),
    ("solve 2x+3=7 and then write a poem about it", "reasoning"),
])
def test_creative_writing_about_code_or_numbers_stays_writing(text: str, decision: str) -> None:
    assert _lexical_decision(text) == decision
