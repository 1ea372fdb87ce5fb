"""The chat examples (run_demo_loop), driven with scripted user lines: the right agents answer,
the right tools run, and the final text is right."""

from __future__ import annotations

from airline import main as airline
from personal_shopper import database
from personal_shopper import main as shopper
from support_bot import main as support_bot
from support_bot.agents import help_center
from triage_agent import run as triage
from weather_agent import run as weather


def say(*lines):
    """The arguments that make an example read `lines` as the user's, one after the other."""
    return [arg for line in lines for arg in ("--say", line)]


def says(out, agent, text):
    """Whether `agent` said `text` (a line `<agent>: <text...>`)."""
    return any(line.startswith(f"{agent}: {text}") for line in out.splitlines())


def test_triage_refund_discount_then_sales(run_example):
    out = run_example(
        triage.main,
        *say(
            "I want a refund for item_42",
            "It was too expensive",
            "I insist",
            "Actually, I want to buy bees",
        ),
    )
    assert out.startswith("(offline: scripted model")
    assert says(out, "Triage Agent", "transfer_to_refunds()")
    assert says(out, "Refunds Agent", "Sorry to hear that. Why would you like a refund for item_42")
    assert "[mock] Applying discount..." in out
    assert says(out, "Refunds Agent", "Applied a discount of 11% for you")
    assert "[mock] Refunding item item_42 because too expensive..." in out
    assert says(out, "Refunds Agent", 'process_refund("item_id"= "item_42"')
    assert says(out, "Refunds Agent", "transfer_back_to_triage()")
    assert says(out, "Triage Agent", "transfer_to_sales()")
    assert out.rstrip().splitlines()[-1].startswith("Sales Agent: Bees!")


def test_weather_streams_answers_and_sends_email(run_example):
    out = run_example(
        weather.main,
        *say(
            "Hi!",
            "Do I need an umbrella? I'm in chicago.",
            "Email the weather in Oslo to ada@example.com",
        ),
    )
    assert says(out, "Weather Agent", "Hello! Ask me about the weather anywhere.")
    assert says(out, "Weather Agent", 'get_weather("location"= "Chicago")')
    assert says(out, "Weather Agent", "It's 65°F in Chicago right now and dry: no umbrella")
    assert "To: ada@example.com\nSubject: Weather in Oslo" in out
    assert says(out, "Weather Agent", "Done: the forecast is in your inbox (ada@example.com).")


def test_weather_without_streaming(run_example):
    out = run_example(weather.main, "--no-stream", *say("Weather in Paris?"))
    assert says(out, "Weather Agent", "It's 65°F in Paris right now.")


def test_airline_cancel_flow(run_example):
    out = run_example(
        airline.main,
        *say("I want to cancel my flight", "A refund, please", "No, that's all"),
    )
    assert says(out, "Triage Agent", "transfer_to_flight_modification()")
    assert says(out, "Flight Modification Agent", "transfer_to_flight_cancel()")
    # The routine's instructions carry the flight context: the agent names the flight.
    assert says(out, "Flight cancel traversal", "I can cancel flight 1919")
    assert says(out, "Flight cancel traversal", "initiate_refund()")
    assert says(out, "Flight cancel traversal", "case_resolved()")
    assert out.rstrip().endswith("Flight cancel traversal: Thank you for flying with us. Goodbye!")


def test_airline_baggage_then_change_goes_back_through_triage(run_example):
    out = run_example(
        airline.main,
        *say("My bag is lost", "Can I change my flight to tomorrow?"),
    )
    assert says(out, "Lost baggage traversal", "initiate_baggage_search()")
    assert says(out, "Lost baggage traversal", "Good news: we found your bag")
    assert says(out, "Lost baggage traversal", "transfer_to_triage()")
    assert says(out, "Flight change traversal", "valid_to_change_flight()")
    assert says(out, "Flight change traversal", "change_flight()")
    assert says(out, "Flight change traversal", "Done: flight 1919 is changed")


def test_support_bot_answers_from_the_help_center(run_example):
    out = run_example(
        support_bot.main,
        *say(
            "Hi",
            "How do I rotate my API key?",
            "Please open a ticket: my invoice is wrong",
            "Email that to ada@example.com",
        ),
    )
    assert says(out, "User Interface Agent", "Hello!")
    assert says(out, "User Interface Agent", "transfer_to_help_center()")
    assert "Most relevant article: Creating and rotating API keys" in out
    assert says(out, "Help Center Agent", 'From the help center, "Creating and rotating API keys"')
    assert says(out, "Help Center Agent", "Done: Ticket created for Please open a ticket")
    assert says(out, "Help Center Agent", "Done: it is on its way to your inbox.")


def test_help_center_search_is_ranked_full_text():
    def titles(query):
        return [title for title, _, _ in help_center.search(query)]

    assert titles("How do I rotate my API key?")[0] == "Creating and rotating API keys"
    assert titles("I got error 429, too many requests")[0] == "Understanding rate limits"
    assert titles("where can I download my invoices")[0] == "How billing and invoices work"
    assert titles("transcribing a long wav recording")[0] == "Speech to text: supported audio files"
    assert titles('what "is" this? (OR) * NEAR -') == []
    assert titles("how do I") == []
    assert titles("airspeed of an unladen swallow") == []
    assert len(help_center.search("account data", limit=2)) == 2


def test_personal_shopper_refunds_and_orders_in_its_database(run_example):
    out = run_example(
        shopper.main,
        *say(
            "I want to return something",
            "user 1, item 11",
            "by email please",
            "Now I'd like to buy wool socks",
            "user 1, product 8",
        ),
    )
    assert "purchases: item_id, user_id, date_of_purchase, product_id, amount, refunded" in out
    assert says(out, "Triage Agent", "transfer_to_refunds_agent()")
    assert says(out, "Refunds Agent", "Sure. Please give me your user ID and the item ID")
    assert says(out, "Refunds Agent", 'refund_item("user_id"= 1, "item_id"= 11)')
    assert says(out, "Refunds Agent", "Refund initiated: $120.00 to user ID 1 for item ID 11.")
    assert says(out, "Refunds Agent", "Emailed customer alice@example.com a notification.")
    assert says(out, "Refunds Agent", "transfer_back_to_triage()")
    assert says(out, "Triage Agent", "transfer_to_sales_agent()")
    assert says(
        out, "Sales Agent", "Ordered Wool socks for user ID 1 at $12.50; its item ID is 15."
    )
    with database.get_connection() as db:
        refunded = db.execute("SELECT refunded FROM purchases WHERE item_id = 11").fetchone()
        ordered = db.execute("SELECT user_id, product_id FROM purchases WHERE item_id = 15")
        assert (refunded, ordered.fetchone()) == ((1,), (1, 8))
    db.close()


def test_personal_shopper_tools_report_what_is_missing():
    from personal_shopper.agents import notify_customer, order_item, refund_item

    database.initialize_database()
    assert refund_item(2, 11) == "No purchase found for user ID 2 and item ID 11."
    assert refund_item(1, 12).startswith("Refund initiated")
    assert refund_item(1, 12) == "Item ID 12 was already refunded."
    assert order_item(1, 99) == "Product 99 not found."
    assert notify_customer(3, "phone") == "No phone contact available for user ID 3."
    assert notify_customer(42, "email") == "User ID 42 not found."
