"""The weather example's agent: it looks up the weather and can email it."""

import json

from durable_swarm import Agent


def get_weather(location, time="now"):
    """Get the current weather in a given location. The location must be a city."""
    return json.dumps({"location": location, "temperature": "65", "time": time})


def send_email(recipient, subject, body):
    """Send an email."""
    print("Sending email...")
    print(f"To: {recipient}\nSubject: {subject}\nBody: {body}")
    return "Sent!"


weather_agent = Agent(
    name="Weather Agent",
    instructions="You are a helpful agent who answers questions about the weather.",
    functions=[get_weather, send_email],
)
