"""The scripted model the weather example uses offline: weather questions call get_weather."""

import json
import re

from _common import has_words, last_user_text, my_tool_result, place_in, tools_called

from durable_swarm.testing import ToolCall, calls, text

WEATHER_WORDS = ("weather", "temperature", "forecast", "umbrella", "rain*", "sunny", "cold", "hot")


def respond(messages, tools):
    """Call get_weather for weather questions (and send_email when asked), then answer."""
    said = last_user_text(messages)
    result = my_tool_result(messages, tools)
    email = re.search(r"[\w.+-]+@[\w-]+\.[\w.]+", said)
    if result is not None and messages[-1]["tool_name"] == "get_weather":
        weather = json.loads(result)
        report = f"It's {weather['temperature']}°F in {weather['location']} right now"
        if email and "send_email" not in tools_called(messages):
            body = f"{report}."
            subject = f"Weather in {weather['location']}"
            arguments = {"recipient": email.group(0), "subject": subject, "body": body}
            return calls(ToolCall("send_email", arguments))
        if has_words(said, "umbrella", "rain*"):
            return text(f"{report} and dry: no umbrella needed today.")
        return text(f"{report}.")
    if result is not None:
        return text(f"Done: the forecast is in your inbox ({email.group(0) if email else 'sent'}).")
    talked_weather = any(m.get("tool_name") == "get_weather" for m in messages)
    if has_words(said, *WEATHER_WORDS) or (talked_weather and place_in(said)):
        place = place_in(said)
        if place:
            return calls(ToolCall("get_weather", {"location": place}))
        return text("Which city would you like the weather for?")
    if has_words(said, "hi", "hello", "hey"):
        return text("Hello! Ask me about the weather anywhere.")
    return text("I can only help with the weather, sorry.")
